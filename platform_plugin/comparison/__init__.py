"""The ranks of a job side by side: the table, the diagnosis, the chart and MLflow views."""
