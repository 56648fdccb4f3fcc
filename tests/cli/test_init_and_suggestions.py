"""`platform-run init`, "did you mean" for typos, torchrun's and papermill's spellings."""
from __future__ import annotations

import json

import pytest
from dotenv import dotenv_values

from platform_plugin.cli import main
from platform_plugin.cli.init import FILES, TEMPLATES


def test_init_writes_the_templates_into_code_and_keeps_existing_files(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.delenv("PLATFORM_CODE_DIR", raising=False)
    sub = tmp_path / "CODE" / "notebooks"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert main(["init"]) == 0  # the nearest folder named CODE, not the current one
    code = tmp_path / "CODE"
    for name in FILES:
        assert (code / name).read_bytes() == (TEMPLATES / name).read_bytes()
    assert (code / "run.sh").stat().st_mode & 0o111
    assert dotenv_values(code / ".env.example") == {}
    (code / "platform.toml").write_text("# mine\n")
    capsys.readouterr()
    assert main(["init"]) == 0
    assert (code / "platform.toml").read_text() == "# mine\n"
    assert "kept" in capsys.readouterr().out
    assert main(["init", "--force", str(code)]) == 0
    assert (code / "platform.toml").read_bytes() == (TEMPLATES / "platform.toml").read_bytes()


def test_templates_are_package_data_and_the_top_level_folder_links_there(repo_root):
    assert TEMPLATES.parent.name == "platform_plugin"
    assert (repo_root / "templates").resolve() == TEMPLATES
    json.loads((TEMPLATES / "notebook.ipynb").read_text())


@pytest.mark.parametrize("argv, usage, hint", [
    (["launch", "--nprocs", "2", "--", "python", "t.py"], "usage: platform-run launch",
     "--nprocs: did you mean --nproc?"),
    (["debug", "nb.ipynb", "--outptu", "x.ipynb"], "usage: platform-run debug",
     "--outptu: did you mean --output?"),
    (["lanch"], "usage: platform-run", "did you mean 'launch'?"),
    # a value glued on: the flag and its value, not the flag alone
    (["launch", "--show-all", "--", "python", "t.py"], "usage: platform-run launch",
     "--show-all: did you mean --show all?"),
])
def test_typos_get_the_sub_command_usage_and_a_suggestion(argv, usage, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and hint in err, err


def test_torchrun_spellings_are_aliases(capsys):
    from platform_plugin.launcher.options import from_arguments
    import argparse
    from platform_plugin.launcher.options import add_arguments
    parser = argparse.ArgumentParser(prog="x")
    add_arguments(parser)
    args = parser.parse_args(["--nproc-per-node", "4", "--node_rank", "1", "--nnodes", "2",
                              "--master_addr", "10.0.0.1", "--master-port", "29500",
                              "--max_restarts", "2", "--",
                              "python", "t.py"])
    options = from_arguments(args)
    assert (options.nproc, options.node_rank, options.nnodes, options.master_addr,
            options.master_port) == (4, 1, 2, "10.0.0.1", 29500)
    assert main(["launch", "--max-restarts", "-1", "--", "python", "t.py"]) == 2
    assert "[LAUNCH_MAX_RESTARTS]" in capsys.readouterr().err


def test_papermill_habits_positional_output_and_yaml_parameters(tmp_path, capsys):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("epochs = 1\nlr = 0.1", metadata={"tags": ["parameters"]})]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    code = main(["debug", str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), "-y",
                 "{epochs: 5, lr: 0.5}", "-p", "lr", "0.2", "-k", "python3", "--log-output",
                 "--cwd", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"output     {tmp_path / 'out.ipynb'}" in out
    assert "epochs = 5" in out and "lr = 0.2" in out  # -y, and -p wins over it
    assert main(["debug", str(tmp_path / "in.ipynb"), "a.ipynb", "--output", "b.ipynb",
                 "--dry-run"]) == 2
    assert "[NB_OUTPUT]" in capsys.readouterr().err


def test_doctor_warns_when_code_holds_what_a_full_run_would_clean(tmp_path, monkeypatch, capsys):
    from tests.helpers import clean_env
    code = tmp_path / "CODE"
    (code / "kernel_meta").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    monkeypatch.chdir(code)
    monkeypatch.setattr("os.environ", clean_env())
    main(["doctor"])
    assert "OK    CODE/ cleanup" in capsys.readouterr().out  # nothing yet: the folder is empty
    (code / "kernel_meta" / "op.o").write_bytes(b"x" * 2048)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "WARN  CODE/ cleanup" in out and "caches 1 files 2.0 KiB" in out, out
    assert "%platform_clean --dry-run" in out


def test_every_bad_flag_of_a_line_is_named_at_once(capsys):
    """`2` after an unknown flag is its value, not the command's start: the flags after it are
    checked too (argparse alone named only --nprocs)."""
    with pytest.raises(SystemExit):
        main(["launch", "--nprocs", "2", "--show-all", "--trackin", "none", "--", "python", "t.py"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --nprocs --show-all --trackin" in err, err
    for hint in ("--nprocs: did you mean --nproc?", "--show-all: did you mean --show all?",
                 "--trackin: did you mean --tracking?"):
        assert hint in err, err


def test_every_bad_flag_of_a_dist_run_line_is_named_at_once():
    from platform_plugin.errors import ConfigError
    from platform_plugin.magics.dist_run import _parser
    with pytest.raises(ConfigError) as refused:
        _parser().parse_args(["--nprocs", "2", "--show-all", "python", "train.py"])
    text = str(refused.value)
    assert "--nprocs: did you mean --nproc?" in text and "--show-all: did you mean --show all?" in text


def test_server_help_names_its_sub_command_once_apart_from_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["server", "--help"])
    out = capsys.readouterr().out
    assert "[--no-auth] add-user" not in out and "\n  add-user " not in out, out
    assert "       platform-run server add-user NAME [--data-dir DIR]" in out
    assert "add-user NAME: create a team member's user" in out
