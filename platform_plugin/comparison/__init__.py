"""The ranks of a job side by side, read after it ran from its spool folder and its MLflow store:

- table.py: the per-rank table (`platform-run compare`), the straggler, the ranks that deviate,
  the chart and the MLflow page that overlays every rank;
- diagnosis.py: why a straggler is slow, from the launcher's system metrics;
- rendering.py: the table and its flagged ranks' lines as text, printed by `platform-run
  compare` and shown by `%dist_compare` alike;
- view.py: the notebook's view (`%dist_compare`, `platform_plugin.compare()`): the table, the
  chart and the MLflow page in the cell;
- jupyter_ui.py: the MLflow UI served through the Jupyter server (`platform-run ui`, the view).
"""
