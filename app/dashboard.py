"""`streamlit run app/dashboard.py -- A.drift B.drift` from a checkout: the dashboard is drifttool.dashboard.app."""

from drifttool.dashboard.app import main

main()
