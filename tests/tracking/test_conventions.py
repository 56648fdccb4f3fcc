"""MLflow conventions of a tracked job, against a real sqlite store: one experiment per project,
unique run names, MLflow's standard tags, a notebook run's parameters, KILLED on interrupt, the
store outside CODE/, and MLflow's console output kept out of the user's cell."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from platform_plugin.cli import main
from platform_plugin.tracking.job.handle import JobTracking
from tests.tracking.helpers import child_runs, client, make_plan


class Result:  # what finish() reads of a JobResult
    def __init__(self, status):
        self.ok = status == "succeeded"
        self.status = status


def plan_in(folder: Path, tmp_path: Path, env: dict | None = None, **kwargs):
    plan = make_plan(tmp_path, 2, env=env, **kwargs)
    ranks = tuple(dataclasses.replace(r, cwd=str(folder)) for r in plan.ranks)
    return dataclasses.replace(plan, ranks=ranks)


def run_job(plan, status="succeeded"):
    jt = JobTracking.create("mlflow", plan)
    jt.prepare()
    jt.start()
    report = jt.finish(Result(status))
    assert report.wait_ended()  # the forwarding helper creates and ends the runs
    return report


def git_repo(folder: Path) -> str:
    def git(*args):
        return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                              text=True).stdout.strip()
    git("init", "-q")
    (folder / "train.py").write_text("print('hi')\n")
    git("add", "train.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return git("rev-parse", "HEAD")


def test_a_notebook_run_in_code_gets_one_experiment_named_runs_params_and_standard_tags(
        tracking_env, tmp_path, capfd):
    tracking_env.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))  # no store template:
    # MLflow itself creates the store (its lines must reach mlflow.log, not the cell)
    code = tmp_path / "digits" / "CODE"
    code.mkdir(parents=True)
    commit = git_repo(code)
    notebook = code / "train_digits.ipynb"
    env = {"PLATFORM_NOTEBOOK": str(notebook),
           "PLATFORM_NOTEBOOK_PARAMETERS": json.dumps({"epochs": 6, "lr": 0.05, "platform_mode": "full"})}
    reports = [run_job(plan_in(code, tmp_path, env)), run_job(plan_in(code, tmp_path, env), "interrupted")]
    # what the jobs printed, read before this test opens the store itself (MLflow 3.1 logs
    # "Creating initial MLflow database tables" at every client's first open of a store)
    out, err = capfd.readouterr()

    # the store lives beside CODE/ (the platform snapshots CODE/, a full run cleans it)
    assert not (code / "mlflow.db").exists() and (tmp_path / "digits" / "mlflow.db").is_file()
    c = client(f"sqlite:///{tmp_path / 'digits' / 'mlflow.db'}")
    parents = [c.get_run(r.parent_run_id) for r in reports]
    assert {p.info.experiment_id for p in parents} == {parents[0].info.experiment_id}  # one experiment
    assert c.get_experiment(parents[0].info.experiment_id).name == "train_digits"
    names = [p.info.run_name for p in parents]
    assert len(set(names)) == 2 and all(n.startswith("train-2026") for n in names)  # job + time
    assert [p.info.status for p in parents] == ["FINISHED", "KILLED"]
    tags = parents[0].data.tags
    assert tags["mlflow.source.name"] == str(notebook) and tags["mlflow.source.type"] == "NOTEBOOK"
    assert tags["mlflow.source.git.commit"] == commit and tags["mlflow.user"]
    assert parents[0].data.params == {"epochs": "6", "lr": "0.05", "platform_mode": "full"}
    children = child_runs(c, reports[1].parent_run_id)
    assert [r.info.status for r in children] == ["KILLED", "KILLED"]
    assert all(r.data.tags["mlflow.user"] == tags["mlflow.user"] for r in children)

    # MLflow's console lines (store creation) went to the job's log, not to the cell
    assert "mlflow" not in (out + err).lower(), out + err
    log = Path(reports[0].spool_dir) / "mlflow.log"
    assert "Creating initial MLflow database tables" in log.read_text()


def test_scripts_outside_code_share_the_folder_experiment_and_env_shows_the_store(
        tracking_env, tmp_path, capsys):
    project = tmp_path / "myproject"
    project.mkdir()
    first = run_job(plan_in(project, tmp_path, job_name="cell", command=("python", "cell.py")))
    second = run_job(plan_in(project, tmp_path, job_name="trian", command=("python", "trian.py")),
                     status="failed")
    c = client(f"sqlite:///{project / 'mlflow.db'}")
    parents = [c.get_run(r.parent_run_id) for r in (first, second)]
    assert [c.get_experiment(p.info.experiment_id).name for p in parents] == ["myproject"] * 2
    assert parents[0].data.tags["mlflow.source.name"] == str(project / "cell.py")
    assert parents[0].data.tags["mlflow.source.type"] == "LOCAL"
    assert "mlflow.source.git.commit" not in parents[0].data.tags  # not a git repository
    assert parents[1].info.status == "FAILED"

    tracking_env.chdir(project)
    assert main(["env"]) == 0
    said = capsys.readouterr().out
    assert f"MLflow store: sqlite:///{project / 'mlflow.db'}" in said
    # named by the folder here, and said so: the same project's notebooks track into theirs
    assert ("experiment: myproject (the project folder's name; a notebook's jobs track into "
            "the notebook's name, MLFLOW_EXPERIMENT_NAME names one for all)") in said
    tracking_env.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    tracking_env.setenv("MLFLOW_EXPERIMENT_NAME", "shared")
    assert main(["env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tracking"] == {
        "uri": "http://127.0.0.1:5999", "source": "MLFLOW_TRACKING_URI", "experiment": "shared",
        "experiment_source": "MLFLOW_EXPERIMENT_NAME"}


# MLflow 3.1's migration config (the logging part of its alembic.ini, as its env.py passes it to
# logging.config.fileConfig): a stderr handler on the root logger, alembic at INFO
MIGRATIONS_INI_LOGGING = """
[loggers]
keys = root,sqlalchemy,alembic
[handlers]
keys = console
[formatters]
keys = generic
[logger_root]
level = WARN
handlers = console
qualname =
[logger_sqlalchemy]
level = WARN
handlers =
qualname = sqlalchemy.engine
[logger_alembic]
level = INFO
handlers =
qualname = alembic
[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic
[formatter_generic]
format = %(levelname)-5.5s [%(name)s] %(message)s
"""


def test_opening_a_store_skips_only_the_migrations_logging_config(tmp_path):
    import logging
    import logging.config

    from platform_plugin.tracking.sinks.mlflow_conventions import migrations_keep_logging
    ini = tmp_path / "mlflow" / "store" / "db_migrations" / "alembic.ini"
    ini.parent.mkdir(parents=True)
    ini.write_text(MIGRATIONS_INI_LOGGING)
    other = tmp_path / "users_own.ini"
    other.write_text(MIGRATIONS_INI_LOGGING.replace("qualname = alembic", "qualname = users_own"))
    root = logging.getLogger()
    before = (root.handlers[:], root.level, logging.getLogger("alembic").level)
    unguarded = logging.config.fileConfig
    try:
        with migrations_keep_logging(), migrations_keep_logging():  # nested: two stores at once
            logging.config.fileConfig(str(ini), disable_existing_loggers=False)
            assert (root.handlers, root.level, logging.getLogger("alembic").level) == before
            logging.config.fileConfig(str(other), disable_existing_loggers=False)
            assert logging.getLogger("users_own").level == logging.INFO  # anyone else's goes through
        assert logging.config.fileConfig is unguarded
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])


USER_PROCESS = """
import logging, sys
from platform_plugin import tracking
handlers = list(logging.getLogger().handlers)
t = tracking.get_tracker()  # no launcher: forwarding in this process opens the fresh store
t.log_metric("loss", 0.25)
t.close()
assert logging.getLogger().handlers == handlers, logging.getLogger().handlers
"""


def test_a_store_first_created_in_the_users_process_prints_nothing(tracking_env, tmp_path):
    """Tracking without the launcher (a cell that calls get_tracker): the store is created in
    the user's own process. Nothing of MLflow's or alembic's may reach its stderr (the cell),
    and its logging must be as it was (MLflow 3.1's migration replaced the root handlers).
    `make test-compat` runs it against MLflow 3.1.4, where the migration did both."""
    tracking_env.setenv("PLATFORM_TRACKING", "mlflow")
    tracking_env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracking_env.setenv("PLATFORM_CACHE_DIR", str(tmp_path / "cache"))  # no store template:
    # MLflow itself creates the store and runs its migrations in this process
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", USER_PROCESS], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stderr
    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = c.search_runs([e.experiment_id for e in c.search_experiments()])
    assert [r.data.metrics for r in runs] == [{"loss": 0.25}]
    logs = list((tmp_path / "platform_logs").rglob("mlflow.log"))
    assert logs and "Creating initial MLflow database tables" in logs[0].read_text()
