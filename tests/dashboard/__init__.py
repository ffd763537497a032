"""dashboard/: the Streamlit app, its server and command line."""
