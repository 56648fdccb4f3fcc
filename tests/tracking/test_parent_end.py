"""The parent run of a multi-server job ends once every server reported, also when two
launchers report at once (a real MLflow store on SQLite)."""
from __future__ import annotations

import threading

from platform_plugin.tracking.shared.state import SinkConfig
from platform_plugin.tracking.sinks import mlflow_job


def test_two_launchers_reporting_at_once_still_end_the_parent(tmp_path):
    """Node 0 saw node 2 vanish, node 1 did not. Worst interleaving: node 0 reads the tags
    before node 1 wrote its end, node 1 reads them before node 0 reported node 2. One of the
    two must still end the parent (a check-then-act race would leave it RUNNING for good)."""
    from mlflow import MlflowClient
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("parent-end")
    parent = client.create_run(experiment).info.run_id

    def config(server: str, gone: list) -> SinkConfig:
        return SinkConfig(sink="mlflow", experiment_id=experiment, parent_run_id=parent,
                          job={"servers": 3, "server_id": server, "gone_servers": gone})

    node0_read, node1_done = threading.Event(), threading.Event()

    class Node0Client:
        """Node 0's calls, its report of node 2 held until node 1 has read and returned."""

        def __getattr__(self, name):
            return getattr(client, name)

        def get_run(self, run_id):
            run = client.get_run(run_id)
            node0_read.set()
            return run

        def set_tag(self, run_id, key, value):
            if key == mlflow_job.SERVER_TAG + "node2":
                assert node1_done.wait(60)
            client.set_tag(run_id, key, value)

    ended: dict[str, object] = {}
    node0 = threading.Thread(target=lambda: ended.update(node0=mlflow_job.end_parent(
        Node0Client(), config("node0", ["node2"]), "FAILED", "server node2: silent")))
    node0.start()
    assert node0_read.wait(60)
    ended["node1"] = mlflow_job.end_parent(client, config("node1", []), "FAILED")
    node1_done.set()
    node0.join(60)
    assert ended == {"node0": "FAILED", "node1": None}
    run = client.get_run(parent)
    assert run.info.status == "FAILED"
    assert run.data.tags[mlflow_job.FAILED_SERVERS_TAG] == "node0, node1, node2"
