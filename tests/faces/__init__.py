"""The faces (CLI, notebook API) and what users see of the project: bad-input batteries through them, the wheel, the README, CI output."""
