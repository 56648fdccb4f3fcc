"""MLflow servers: the team server (PostgreSQL, bulk route) and the local UI server."""
