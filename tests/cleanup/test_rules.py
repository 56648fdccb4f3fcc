"""Cleanup rules (data files), matching, and the choice of ROOT."""
from __future__ import annotations

from pathlib import Path

import pytest

from platform_plugin.cleanup import run as cleanup
from platform_plugin.cleanup.run import CleanupRules, find_root, load_categories
from platform_plugin.errors import ConfigError

from tests.helpers import REPO
from tests.notebook.helpers import write_tree


def test_rules_are_package_data_and_the_top_level_cleanup_folder_is_the_same_copy():
    assert cleanup.rules_dir().resolve() == (REPO / "cleanup").resolve()
    assert cleanup.rules_dir().parent == Path(cleanup.__file__).parent
    categories = load_categories()
    assert set(categories) == {"caches", "logs", "models"}
    dirs = {"/".join(p) for c in categories.values() for p in c.directories}
    files = {"/".join(p) for c in categories.values() for p in c.files}
    assert {"kernel_meta", "rank_*/kernel_meta", "rank_*/graph_cache", "somas_meta", "atc_data",
            "actor_set", "verbose_ir_files", "__pycache__", ".ipynb_checkpoints",
            "rank_*/logs", "platform_logs"} <= dirs
    assert {"*.ir", "analyze_fail.ir", "fusion_result.json", "scheduler.log", "worker_*.log",
            "*.log", "*.ckpt", "*-graph.meta", "*.mindir", "*.air", "*.om", "*.onnx"} <= files


def rules(**kwargs) -> CleanupRules:
    return CleanupRules(load_categories(), **kwargs)


@pytest.mark.parametrize("parts, category", [
    (("kernel_meta",), "caches"),
    (("a", "b", "kernel_meta"), "caches"),
    (("rank_3", "graph_cache"), "caches"),
    (("x", "rank_0", "graph_cache"), "caches"),
    (("graph_cache",), None),  # only below rank_*
    (("rank_0", "logs"), "logs"),
    (("logs",), None),
    (("device_0",), "logs"),
    (("device_utils",), None),  # digits only: a user's folder is not a shell-launch folder
    (("platform_logs",), "logs"),
    (("src",), None),
])
def test_directory_patterns(parts, category):
    assert rules().directory_category(parts) == category


@pytest.mark.parametrize("name, category", [
    ("graph.ir", "caches"), ("analyze_fail.ir", "caches"), ("fusion_result.json", "caches"),
    ("worker_1.log", "logs"), ("train.log", "logs"), ("net.ckpt", "models"),
    ("net-graph.meta", "models"), ("net.mindir", "models"), ("net.onnx", "models"),
    ("net.om", "models"), ("net.air", "models"), ("results.json", None), ("log.txt", None),
    # torch, safetensors, Keras, TensorFlow 1.x checkpoints; not the names data shares
    ("digits_mlp.pt", "models"), ("best.pth", "models"), ("model.safetensors", "models"),
    ("net.keras", "models"), ("net.weights.h5", "models"),
    ("model.ckpt-100.index", "models"), ("model.ckpt-100.data-00000-of-00001", "models"),
    ("train.h5", None), ("vocab.bin", None), ("graph.pb", None),
    # protected names win over any rule
    ("train.py", None), ("kernel_meta.md", None), ("run.sh", None), (".env", None),
])
def test_file_patterns_and_protected_names(name, category):
    assert rules().file_category(("sub", name)) == category


def test_keep_globs_and_protected_output_paths():
    r = rules(keep=("*.ckpt", "data/raw"), protect=("runs/out.ipynb", "kernel_meta/keep.bin"))
    assert r.must_stay(("models", "best.ckpt"))
    assert r.must_stay(("data", "raw")) and not r.must_stay(("data", "raw2"))
    assert r.must_stay(("kernel_meta", "keep.bin")) and not r.must_stay(("kernel_meta",))
    assert not r.must_stay(("kernel_meta", "other.bin"))
    assert r.must_stay((".env",)) and not rules().must_stay(("a.log",))


def test_only_selects_categories_and_rejects_unknown_ones(tmp_path):
    assert list(CleanupRules.load(tmp_path, only=["models"]).categories) == ["models"]
    with pytest.raises(ConfigError, match="choose from caches, logs, models"):
        CleanupRules.load(tmp_path, only=["cache"])


def test_platformkeep_file(tmp_path):
    (tmp_path / ".platformkeep").write_text("# pretrained weights\npretrained/*.ckpt\n\n*.onnx  # ok\n")
    r = CleanupRules.load(tmp_path, keep=["x.log"])
    assert r.keep == ("x.log", "pretrained/*.ckpt", "*.onnx")


def test_bad_rule_file_is_a_config_error(tmp_path):
    (tmp_path / "bad.toml").write_text('category = "x"\nfiles = "*.log"\n')
    with pytest.raises(ConfigError, match="bad.toml"):
        load_categories(tmp_path)
    (tmp_path / "bad.toml").write_text('category = "x"\npatterns = ["*.log"]\n')
    with pytest.raises(ConfigError, match="unknown keys"):
        load_categories(tmp_path)


# ---------------------------------------------------------------- root

def project(path: Path) -> Path:
    write_tree(path, {"train.py": "print()"})
    return path


def test_root_order_flag_then_env_then_code_ancestor_then_cwd(tmp_path):
    code = project(tmp_path / "CODE")
    other = project(tmp_path / "other")
    deep = code / "exp" / "a"
    deep.mkdir(parents=True)
    assert find_root(other, cwd=deep, environ={"PLATFORM_CODE_DIR": str(code)}) == other
    assert find_root(None, cwd=deep, environ={"PLATFORM_CODE_DIR": str(other)}) == other
    assert find_root(None, cwd=deep, environ={}) == code
    assert find_root(None, cwd=other, environ={}) == other


def test_root_refuses_filesystem_root_home_and_non_projects(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="filesystem root"):
        find_root("/", environ={})
    home = project(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(ConfigError, match="home folder"):
        find_root(None, cwd=home, environ={})
    empty = tmp_path / "empty"
    write_tree(empty, {"data.csv": "1", "kernel_meta/x": ""})
    with pytest.raises(ConfigError, match="does not look like a CODE/ folder") as info:
        find_root(None, cwd=empty, environ={})
    assert info.value.problems[0].code == "CLEAN_ROOT_REFUSED"
    with pytest.raises(ConfigError, match="not a folder"):
        find_root(tmp_path / "missing", environ={})


def test_named_roots_may_hold_projects_one_level_down_a_bare_cwd_may_not(tmp_path):
    write_tree(tmp_path / "CODE", {"exp1/notebook.ipynb": "{}"})
    assert find_root(None, cwd=tmp_path / "CODE", environ={}) == tmp_path / "CODE"
    assert find_root(tmp_path / "CODE", environ={}) == tmp_path / "CODE"
    write_tree(tmp_path / "shared", {"exp1/notebook.ipynb": "{}"})
    with pytest.raises(ConfigError, match="does not look like a CODE/ folder"):
        find_root(None, cwd=tmp_path / "shared", environ={})
    with pytest.raises(ConfigError, match="does not look like a CODE/ folder"):
        find_root(tmp_path, environ={})  # projects two levels down: not a CODE/ folder


@pytest.mark.parametrize("keep", [(), ("*.ckpt", "keep_me")])
def test_names_that_stay_says_what_stays_by_name_says_for_a_whole_folder(tmp_path, keep):
    """The whole-folder test (substring marks in the joined names first) never differs from
    the per-name one, for names next to, inside and around the protected ones."""
    names = ["a.py", "a.pyc", "x.py.o", "py", ".env", "a.env", ".envx", "x.env.o", ".git",
             ".gitignore", "platform.toml", "platform.tomlx", "mlruns", "mlruns2", "mlartifacts",
             "mlflow.db", "mlflow.db-wal", "xmlflow.db", "notes.md", "run.sh", "n.ipynb",
             ".platformkeep", "w.ckpt", "keep_me", "keep_me.o", "line\n.py", "k.o", "0.md.o"]
    rules = CleanupRules.load(tmp_path, keep=keep)
    expected = {name for name in names if rules.stays_by_name(name)}
    for shift in range(len(names)):  # every name first, last and in the middle once
        order = names[shift:] + names[:shift]
        assert rules.names_that_stay(order) == expected
        assert rules.names_that_stay([n for n in order if n not in expected]) == set()
