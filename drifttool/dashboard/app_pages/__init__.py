"""The dashboard's pages, one script each: Streamlit runs them (registered by ../app.py); nothing imports them."""
