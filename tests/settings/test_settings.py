"""Settings: the precedence matrix of both modes, conflicts, .env handling, process_env."""
from __future__ import annotations

import pytest

from tests.ranktable.samples import TABLE_2S, TABLE_4P, TABLE_8P, codes
from platform_plugin import settings
from platform_plugin.errors import ConfigError

T4, T8, T2S = str(TABLE_4P), str(TABLE_8P), str(TABLE_2S)


def resolve(tmp_path, mode=None, environ=None, dotenv="", flags=None, **kwargs):
    if dotenv:
        (tmp_path / ".env").write_text(dotenv, encoding="utf-8")
    return settings.resolve(mode, environ=environ or {}, flags=flags, cwd=str(tmp_path),
                            **kwargs)


def refused(tmp_path, *args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        resolve(tmp_path, *args, **kwargs)
    return err.value


@pytest.mark.parametrize("mode", settings.MODES)
def test_no_rank_table_resolves_in_both_modes(tmp_path, mode):
    s = resolve(tmp_path, mode)
    assert (s.rank_table, s.rank_table_file, s.rank_size, s.rank_start) == (None, None, None, 0)
    assert s.row("RANK_START").source == "default"
    assert s.process_env() == {"PLATFORM_RUN_MODE": mode, "RANK_START": "0"}


# (mode, platform env, .env text, flags) -> expected (value, source) of the variable
PRECEDENCE = [
    # debug: RANK_START / RANK_ID are the user's: flag > platform > .env > default/derived
    ("debug", "RANK_START", {}, "", {}, ("0", "derived")),
    ("debug", "RANK_START", {}, "RANK_START=0", {}, ("0", ".env")),
    ("debug", "RANK_ID", {}, "", {}, ("0", "default")),
    ("debug", "RANK_ID", {}, "RANK_ID=2", {}, ("2", ".env")),
    ("debug", "RANK_ID", {}, "RANK_ID=2", {"rank_id": "3"}, ("3", "flag")),
    ("debug", "RANK_ID", {"RANK_ID": "1"}, "RANK_ID=2", {}, ("1", "platform")),
    ("debug", "RANK_ID", {"RANK_ID": "1"}, "", {"--rank-id": "3"}, ("3", "flag")),
    # debug: RANK_TABLE_FILE is the platform's, a user value only when it set none
    ("debug", "RANK_TABLE_FILE", {}, f"RANK_TABLE_FILE={T4}", {}, (T4, ".env")),
    ("debug", "RANK_TABLE_FILE", {}, f"RANK_TABLE_FILE={T8}", {"rank_table": T4}, (T4, "flag")),
    ("debug", "RANK_TABLE_FILE", {"RANK_TABLE_FILE": T4}, f"RANK_TABLE_FILE={T8}", {},
     (T4, "platform")),
    # derived in both modes
    ("debug", "DEVICE_ID", {}, "RANK_ID=3", {}, ("7", "derived")),
    ("debug", "RANK_SIZE", {}, "", {}, ("4", "derived")),
    ("full", "RANK_SIZE", {}, "", {}, ("4", "derived")),
    # full: RANK_START is the platform's; a user value only when it set none
    ("full", "RANK_START", {"RANK_START": "0"}, "RANK_START=0", {}, ("0", "platform")),
    ("full", "RANK_START", {}, "RANK_START=0", {}, ("0", ".env")),
    ("full", "RANK_ID", {}, "", {}, (None, "derived")),
    ("full", "DEVICE_ID", {}, "", {}, (None, "derived")),
]


@pytest.mark.parametrize("mode, name, environ, dotenv, flags, expected", PRECEDENCE)
def test_precedence_matrix(tmp_path, mode, name, environ, dotenv, flags, expected):
    environ = {"RANK_TABLE_FILE": T4, **environ} if name != "RANK_TABLE_FILE" else environ
    s = resolve(tmp_path, mode, environ, dotenv, flags)
    row = s.row(name)
    assert (row.value, row.source) == expected


@pytest.mark.parametrize("mode, name, environ, dotenv, flags", [
    # full: any user value that differs from the platform is an error naming both
    ("full", "RANK_START", {"RANK_START": "0"}, "RANK_START=4", {}),
    ("full", "RANK_START", {"RANK_START": "0"}, "", {"rank_start": "4"}),
    ("full", "RANK_TABLE_FILE", {}, f"RANK_TABLE_FILE={T8}", {}),
    ("full", "ASCEND_RT_VISIBLE_DEVICES", {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"},
     "ASCEND_RT_VISIBLE_DEVICES=0,1", {}),
    # debug: a flag that contradicts the platform is refused too (never silently ignored)
    ("debug", "RANK_TABLE_FILE", {}, "", {"rank_table": T8}),
])
def test_conflicts_are_errors_naming_both_sources(tmp_path, mode, name, environ, dotenv, flags):
    err = refused(tmp_path, mode, {"RANK_TABLE_FILE": T4, **environ}, dotenv, flags)
    (problem,) = [p for p in err.problems if p.code == "ENV_CONFLICT"]
    assert problem.path == name and problem.severity == "error"
    assert "the platform (process environment)" in problem.message
    assert (".env" in problem.message) or ("command line" in problem.message)
    assert err.exit_code == 2


def test_debug_dotenv_never_overrides_the_platform_but_warns(tmp_path):
    s = resolve(tmp_path, "debug", {"RANK_TABLE_FILE": T4}, f"RANK_TABLE_FILE={T8}\n")
    assert s.rank_table_file == T4 and s.rank_size == 4
    (warning,) = s.problems
    assert (warning.code, warning.severity) == ("ENV_CONFLICT", "warning")
    assert T4 in warning.message and T8 in warning.message


@pytest.mark.parametrize("mode", settings.MODES)
@pytest.mark.parametrize("where", ["platform", ".env", "flag"])
def test_rank_size_that_disagrees_with_the_table_is_an_error(tmp_path, mode, where):
    kwargs = {"environ": {"RANK_TABLE_FILE": T4}}
    if where == "platform":
        kwargs["environ"]["RANK_SIZE"] = "8"
    elif where == ".env":
        kwargs["dotenv"] = "RANK_SIZE=8\n"
    else:
        kwargs["flags"] = {"RANK_SIZE": "8"}
    err = refused(tmp_path, mode, **kwargs)
    assert "RT_ENV_RANK_SIZE" in codes(err.problems)


def test_seed_error_in_settings(tmp_path):
    err = refused(tmp_path, "debug", {"RANK_TABLE_FILE": T4}, "RANK_ID=4\n")
    (problem,) = err.problems
    assert problem.code == "RT_ENV_RANK_ID"
    assert "valid rank_ids are 0-3" in problem.message and "came from .env" in problem.message


def test_device_id_goes_through_visible_devices(tmp_path):
    s = resolve(tmp_path, "debug", {"RANK_TABLE_FILE": T4, "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"},
                "RANK_ID=2\n")
    assert (s.rank_id, s.device_id) == (2, 2)
    assert s.process_env()["DEVICE_ID"] == "2"
    err = refused(tmp_path, "debug", {"RANK_TABLE_FILE": T4, "ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    assert codes(err.problems) == {"RT_DEVICE_NOT_VISIBLE"}


def test_set_device_id_must_agree_with_the_table(tmp_path):
    assert resolve(tmp_path, "debug", {"RANK_TABLE_FILE": T4, "DEVICE_ID": "5"},
                   "RANK_ID=1\n").device_id == 5
    err = refused(tmp_path, "debug", {"RANK_TABLE_FILE": T4, "DEVICE_ID": "1"}, "RANK_ID=1\n")
    assert codes(err.problems) == {"RT_ENV_DEVICE_ID"}


def test_full_run_ignores_rank_id_from_dotenv_with_a_warning(tmp_path):
    s = resolve(tmp_path, "full", {"RANK_TABLE_FILE": T4, "RANK_START": "0"}, "RANK_ID=1\n")
    assert s.rank_id is None and "RANK_ID" not in s.process_env()
    assert codes(s.problems) == {"ENV_IGNORED"}


def test_multi_server_table_chooses_this_host_or_refuses(tmp_path):
    env = {"RANK_TABLE_FILE": T2S}
    s = resolve(tmp_path, "debug", env, local_addresses={"10.0.0.2"})
    assert (s.server.server_id, s.rank_start, s.rank_id, s.row("RANK_START").source) == (
        "10.0.0.2", 8, 8, "derived")
    err = refused(tmp_path, "debug", env, local_addresses={"127.0.0.1"})
    assert codes(err.problems) == {"RT_SERVER_UNKNOWN"}
    full = resolve(tmp_path, "full", {**env, "RANK_START": "8"}, local_addresses=set())
    assert full.server.server_id == "10.0.0.2"


@pytest.mark.parametrize("environ, expected", [
    ({}, ("debug", settings.AUTO_RULE_DEBUG)),
    ({"RANK_START": "0"}, ("full", settings.AUTO_RULE_FULL)),
    ({"RANK_START": "0", "RANK_ID": "0"}, ("debug", settings.AUTO_RULE_DEBUG)),
    ({"PLATFORM_RUN_MODE": "full"}, ("full", "PLATFORM_RUN_MODE")),
    ({"PLATFORM_RUN_MODE": "Debug", "RANK_START": "0"}, ("debug", "PLATFORM_RUN_MODE")),
])
def test_mode_choice(tmp_path, environ, expected):
    s = resolve(tmp_path, None, environ)
    assert (s.mode, s.mode_source) == expected


def test_explicit_mode_wins_and_bad_modes_are_refused(tmp_path):
    s = resolve(tmp_path, "debug", {"PLATFORM_RUN_MODE": "full"})
    assert (s.mode, s.mode_source) == ("debug", "flag")
    assert codes(refused(tmp_path, "prod").problems) == {"ENV_MODE"}
    assert codes(refused(tmp_path, None, {"PLATFORM_RUN_MODE": "x"}).problems) == {"ENV_MODE"}
    s = resolve(tmp_path, None, {}, "PLATFORM_RUN_MODE=full\n")
    assert s.mode == "debug" and codes(s.problems) == {"ENV_MODE_IN_DOTENV"}


def test_dotenv_is_read_from_the_given_folder_only(tmp_path):
    (tmp_path / ".env").write_text("FROM_PARENT=1\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    assert settings.resolve("debug", environ={}, cwd=str(sub)).user_env == {}
    (sub / "custom.env").write_text("A=1\nexport B='two words'\nEMPTY\n")
    s = settings.resolve("debug", environ={}, cwd=str(sub), env_file="custom.env")
    assert s.user_env == {"A": "1", "B": "two words"} and s.env_files == (str(sub / "custom.env"),)
    with pytest.raises(ConfigError) as err:
        settings.resolve("debug", environ={}, cwd=str(sub), env_file="missing.env")
    assert codes(err.value.problems) == {"ENV_FILE_MISSING"}


def test_a_job_started_inside_code_reads_the_env_beside_code_and_the_nearer_ones(tmp_path):
    """The one rule (util/envfile.py): from the working folder up to the folder holding CODE/,
    a nearer file's value winning; the README's `.env` beside CODE/ is read from CODE/ itself."""
    project = tmp_path / "project"
    (project / "CODE" / "sub").mkdir(parents=True)
    (project / ".env").write_text("MLFLOW_TRACKING_URI=http://team:5000\nWHO=project\n")
    (project / "CODE" / ".env").write_text("WHO=code\n")
    s = settings.resolve("debug", environ={}, cwd=str(project / "CODE" / "sub"))
    assert s.user_env == {"MLFLOW_TRACKING_URI": "http://team:5000", "WHO": "code"}
    assert s.env_files == (str(project / "CODE" / ".env"), str(project / ".env"))
    s = settings.resolve("debug", environ={}, cwd=str(project / "CODE"))
    assert s.user_env["MLFLOW_TRACKING_URI"] == "http://team:5000" and s.user_env["WHO"] == "code"
    # outside any CODE/ folder: the working folder's .env only, never a parent's
    s = settings.resolve("debug", environ={}, cwd=str(project))
    assert s.env_files == (str(project / ".env"),) and s.user_env["WHO"] == "project"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert settings.resolve("debug", environ={}, cwd=str(elsewhere)).env_files == ()


def test_platform_run_env_names_the_env_files_read_and_where_it_looked(tmp_path):
    import subprocess
    import sys

    from tests.helpers import clean_env
    project = tmp_path / "project"
    (project / "CODE").mkdir(parents=True)
    (project / ".env").write_text("MLFLOW_TRACKING_URI=http://team:5000\n")
    shown = subprocess.run([sys.executable, "-m", "platform_plugin", "env", "--mode", "debug"],
                           cwd=project / "CODE", env=clean_env(), capture_output=True, text=True,
                           timeout=60)
    assert f".env: {project / '.env'} " in shown.stdout, shown.stdout + shown.stderr
    assert "MLflow store: http://team:5000" in shown.stdout, shown.stdout
    (project / ".env").unlink()
    shown = subprocess.run([sys.executable, "-m", "platform_plugin", "env", "--mode", "debug"],
                           cwd=project / "CODE", env=clean_env(), capture_output=True, text=True,
                           timeout=60)
    assert (f".env: none (looked for {project / 'CODE' / '.env'}, {project / '.env'})"
            in shown.stdout), shown.stdout + shown.stderr


def test_process_env_combines_dotenv_and_platform_variables(tmp_path):
    s = resolve(tmp_path, "debug", {"RANK_TABLE_FILE": T4, "HOME": "/home/u"},
                "HOME=/elsewhere\nMY_SETTING=on\nRANK_ID=1\n")
    env = s.process_env()
    assert env == {"MY_SETTING": "on", "PLATFORM_RUN_MODE": "debug", "RANK_START": "0",
                   "RANK_TABLE_FILE": T4, "RANK_SIZE": "4", "RANK_ID": "1", "DEVICE_ID": "5"}
    assert "ENV_CONFLICT" in codes(s.problems)  # HOME from .env lost to the platform's


def test_full_process_env_has_no_per_process_variables(tmp_path):
    s = resolve(tmp_path, "full", {"RANK_TABLE_FILE": T8, "RANK_START": "0"})
    assert s.process_env() == {"PLATFORM_RUN_MODE": "full", "RANK_START": "0",
                               "RANK_TABLE_FILE": T8, "RANK_SIZE": "8"}


def test_invalid_rank_table_stops_resolution(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"server_list": []}')
    err = refused(tmp_path, "debug", {"RANK_TABLE_FILE": str(bad)})
    assert {"RT_NO_SERVERS", "RT_MISSING_FIELD"} <= codes(err.problems)


def test_non_integer_values_are_refused(tmp_path):
    err = refused(tmp_path, "debug", {}, "RANK_START=first\n")
    assert codes(err.problems) == {"ENV_NOT_INTEGER"}


def test_unreadable_env_file_is_a_config_error(tmp_path):
    (tmp_path / ".env").write_bytes(b"A=\xff\xfe\n")
    err = refused(tmp_path, "debug")
    assert codes(err.problems) == {"ENV_FILE_UNREADABLE"}


@pytest.mark.parametrize("where", ["platform", ".env"])
def test_a_malformed_visible_devices_list_is_refused_in_a_full_run_too(tmp_path, where):
    """Before: only a debug resolution parsed it; `env`/`doctor --mode full` showed 'a,b'
    without a word and only the launch refused it."""
    environ = {"RANK_TABLE_FILE": T8, "RANK_START": "0"}
    dotenv = ""
    if where == "platform":
        environ["ASCEND_RT_VISIBLE_DEVICES"] = "a,b"
    else:
        dotenv = "ASCEND_RT_VISIBLE_DEVICES=a,b\n"
    err = refused(tmp_path, "full", environ=environ, dotenv=dotenv)
    assert codes(err.problems) == {"RT_VISIBLE_DEVICES"}
    # without a table (a CPU box) the variable is not used: nothing to refuse, as before
    assert resolve(tmp_path, "full", environ={"ASCEND_RT_VISIBLE_DEVICES": "a,b"}) is not None


@pytest.mark.slow
def test_a_job_tracked_into_the_local_store_for_want_of_a_env_says_where_it_looked(tmp_path):
    """A `.env` in a folder the rule does not read (the job went to a local sqlite store
    silently): the job says once where it looked; with a `.env` read it says nothing."""
    import subprocess
    import sys

    from tests.helpers import clean_env
    code = tmp_path / "project" / "CODE"
    code.mkdir(parents=True)
    (code / "train.py").write_text("print('trained')\n")

    def launch():
        return subprocess.run([sys.executable, "-m", "platform_plugin", "launch", "--tracking",
                               "mlflow", "--nproc", "1", "--show", "none", "--log-dir",
                               str(tmp_path / "logs"), "--", sys.executable, "train.py"],
                              cwd=code, env=clean_env(), capture_output=True, text=True,
                              timeout=180)
    done = launch()
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    looked = f"{code / '.env'}, {code.parent / '.env'}"
    assert out.count("tracking: no .env found") == 1 and looked in out, out
    (code.parent / ".env").write_text("MLFLOW_EXPERIMENT_NAME=mine\n")
    done = launch()
    assert done.returncode == 0 and "no .env found" not in done.stdout + done.stderr


@pytest.mark.slow
def test_no_env_found_is_said_once_per_kernel_not_in_every_cell(tmp_path, clean_environ):
    """Two jobs of one process (a kernel's two cells): the second says nothing of it again."""
    import sys

    from platform_plugin.launcher import launch
    code = tmp_path / "project" / "CODE"
    code.mkdir(parents=True)
    clean_environ.chdir(code)
    said: list[str] = []
    for _ in range(2):
        launch([sys.executable, "-c", "print('trained')"], nproc=1, backend="plain",
               tracking="mlflow", show="none", log_dir=str(tmp_path / "logs"), cwd=str(code),
               write=said.append, no_system_metrics=True)
    assert "".join(said).count("tracking: no .env found") == 1, said
