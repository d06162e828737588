"""What a job is on Kubernetes: the workload a pod belongs to, from its labels, annotations and owner.

The pods of one workload (the two pods of a JobSet, the workers of a PyTorchJob) make one job, whose id
is Workload.job_id(namespace) = "<namespace>/<name>". The rules below are tried in order, first match
wins; a pod that matches none (or whose metadata is unknown) is a job of its own, kind "Pod".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuscope.exporter.jobs.pod_metadata import PodMeta


@dataclass(frozen=True)
class Rule:
    where: str  # "labels" or "annotations"
    key: str
    kind: str
    kind_from_owner: bool = False  # the controller owner's kind, when it has the same name as the value
    owner_kind: str | None = None  # applies only when the controller owner is of this kind


RULES: tuple[Rule, ...] = (
    # set by the user on the pod template: an explicit choice, over anything a controller says
    Rule("annotations", "gpuscope.io/job", "job"),
    # Kubeflow Trainer v2 (TrainJob), which runs on JobSet: its pods also carry the JobSet label below
    Rule("labels", "trainer.kubeflow.org/trainjob-name", "TrainJob"),
    # the JobSet controller (jobset.sigs.k8s.io); its child Jobs' pods also carry the Job labels below
    Rule("labels", "jobset.sigs.k8s.io/jobset-name", "JobSet"),
    # Kubeflow Training Operator v1: PyTorchJob, TFJob, MPIJob, ... own their pods directly
    Rule("labels", "training.kubeflow.org/job-name", "KubeflowJob", kind_from_owner=True),
    # KubeRay: the head and worker pods of a RayCluster (a RayJob's cluster too)
    Rule("labels", "ray.io/cluster", "RayCluster"),
    # the Job controller (Kubernetes >= 1.27)
    Rule("labels", "batch.kubernetes.io/job-name", "Job"),
    # the Job controller, older label: so generic a name that it counts only on a pod a Job owns
    Rule("labels", "job-name", "Job", owner_kind="Job"),
)

_BAD_NAME = re.compile(r"[/\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Workload:
    kind: str  # e.g. "JobSet", "PyTorchJob", "Pod"
    name: str

    def job_id(self, namespace: str) -> str:
        return f"{namespace}/{self.name}"


def workload_of(namespace: str, pod: str, meta: PodMeta | None) -> Workload:
    """The workload the pod `namespace/pod` belongs to (`namespace` is part of job_id, not of this choice)."""
    if meta is not None:
        for rule in RULES:
            value = getattr(meta, rule.where).get(rule.key)
            if not _usable(value) or (rule.owner_kind is not None and meta.owner_kind != rule.owner_kind):
                continue
            kind = rule.kind
            if rule.kind_from_owner and meta.owner_kind and meta.owner_name == value:
                kind = meta.owner_kind
            return Workload(kind, value)
    return Workload("Pod", pod)


def _usable(name: object) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 253 and not _BAD_NAME.search(name)
