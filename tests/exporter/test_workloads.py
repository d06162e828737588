"""Which workload (job) a pod belongs to, from the labels and owners the controllers give it."""

from __future__ import annotations

import pytest

from gpuscope.exporter.jobs.pod_metadata import PodMeta
from gpuscope.exporter.jobs.workloads import Workload, workload_of


def meta(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
) -> PodMeta:
    return PodMeta(
        namespace="ml",
        name="pod-x",
        uid="u",
        labels=labels or {},
        annotations=annotations or {},
        owner_kind=owner[0] if owner else None,
        owner_name=owner[1] if owner else None,
    )


JOBSET_POD = {  # what the JobSet controller and the Job controller under it put on a pod
    "jobset.sigs.k8s.io/jobset-name": "llama",
    "jobset.sigs.k8s.io/replicatedjob-name": "node",
    "batch.kubernetes.io/job-name": "llama-node-0",
    "job-name": "llama-node-0",
}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (meta(annotations={"gpuscope.io/job": "nightly-eval"}), Workload("job", "nightly-eval")),
        (meta({"trainer.kubeflow.org/trainjob-name": "ft"}), Workload("TrainJob", "ft")),
        (meta(JOBSET_POD, owner=("Job", "llama-node-0")), Workload("JobSet", "llama")),
        (
            meta({"training.kubeflow.org/job-name": "bert"}, owner=("PyTorchJob", "bert")),
            Workload("PyTorchJob", "bert"),
        ),
        (meta({"training.kubeflow.org/job-name": "bert"}, owner=("MPIJob", "other")), Workload("KubeflowJob", "bert")),
        (meta({"training.kubeflow.org/job-name": "bert"}), Workload("KubeflowJob", "bert")),
        (
            meta({"ray.io/cluster": "raycluster-a", "ray.io/node-type": "worker"}),
            Workload("RayCluster", "raycluster-a"),
        ),
        (meta({"batch.kubernetes.io/job-name": "etl", "job-name": "etl"}), Workload("Job", "etl")),
        (meta({"job-name": "old"}, owner=("Job", "old")), Workload("Job", "old")),
        (meta({"job-name": "mine"}), Workload("Pod", "pod-x")),  # a user's own label, not the Job controller's
        (meta({"job-name": "mine"}, owner=("ReplicaSet", "web-1")), Workload("Pod", "pod-x")),
        (meta({"app": "web"}, owner=("ReplicaSet", "web-1")), Workload("Pod", "pod-x")),
        (None, Workload("Pod", "pod-x")),
    ],
    ids=[
        "annotation",
        "trainjob",
        "jobset",
        "kubeflow-owner",
        "kubeflow-other-owner",
        "kubeflow-no-owner",
        "ray",
        "job",
        "job-old-label",
        "job-old-label-no-owner",
        "job-old-label-other-owner",
        "plain-pod",
        "meta-unknown",
    ],
)
def test_each_rule(pod: PodMeta | None, expected: Workload) -> None:
    assert workload_of("ml", "pod-x", pod) == expected


def test_precedence() -> None:
    trainer = {**JOBSET_POD, "trainer.kubeflow.org/trainjob-name": "ft", "jobset.sigs.k8s.io/jobset-name": "ft"}
    assert workload_of("ml", "p", meta(trainer)) == Workload("TrainJob", "ft")
    chosen = meta(trainer, annotations={"gpuscope.io/job": "sweep-3"})
    assert workload_of("ml", "p", chosen) == Workload("job", "sweep-3")
    ray_job = {"ray.io/cluster": "rc", "batch.kubernetes.io/job-name": "submitter"}
    assert workload_of("ml", "p", meta(ray_job)) == Workload("RayCluster", "rc")


@pytest.mark.parametrize("bad", ["", "x" * 254, "a/b", "tab\there", "nl\n", "del\x7f", "c1\x85"])
def test_bad_names_fall_through(bad: str) -> None:
    pod = meta({**JOBSET_POD, "jobset.sigs.k8s.io/jobset-name": bad}, annotations={"gpuscope.io/job": bad})
    assert workload_of("ml", "p", pod) == Workload("Job", "llama-node-0")
    assert workload_of("ml", "p", meta({"ray.io/cluster": bad})) == Workload("Pod", "p")


def test_longest_name_is_kept_and_job_id() -> None:
    name = "x" * 253
    assert workload_of("ml", "p", meta({"ray.io/cluster": name})) == Workload("RayCluster", name)
    assert Workload("JobSet", "llama").job_id("ml") == "ml/llama"
    assert workload_of("team-a", "solo", None).job_id("team-a") == "team-a/solo"
