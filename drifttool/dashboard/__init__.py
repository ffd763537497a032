"""The Streamlit dashboard: `app.py` (the script `streamlit run` executes), `app_pages/` (one script per page),
`lib.py` (what the pages share: trace loading, filters, widgets), `command.py` (the `drifttool dashboard`
command line and its Host/Origin guard) and `serve.py` (the server process)."""
