"""serving: LLM inference replicas behind a load balancer; nobody waits for anybody across replicas.

Layout. 2-32 nodes x 8 GPUs (H100 SXM, H200 SXM, or nodes of both), one NIC per node. Each node runs 8/tp
independent replicas of one model (8B, 70B, 70B in FP8, 405B in FP8), tensor parallel over the tp GPUs of
the replica (NVLink, an all-reduce per layer): the GPUs of a replica move in lock-step, replicas do not.

Requests. The balancer spreads a request stream with a slow (diurnal) trend over the job, job-wide bursts
(seconds to minutes), and per-replica unevenness: balancer weights that drift (session affinity), bursts
of a tenant's sessions on one replica, and now and then a very long prompt. Arrivals are Poisson per
second on top of that rate. A load-aware balancer (least outstanding requests) gives faster replicas a
little more, a round-robin one does not.

Engine (continuous batching, chunked prefill). Prefill is compute-bound (c_pf seconds per prompt token,
tensor pipes busy, power near the limit: a power-capped H100 shows 0x4 while prefilling). Decode runs one
iteration for the whole batch of B active sequences: t_it = a + b B, where a reads the weights (memory-
bound) plus the per-layer NVLink all-reduces and b reads each sequence's KV cache and does its small GEMMs.
Active sequences follow Little's law, B = lambda * tokens_out * t_it(B), smoothed over a generation's time;
beyond the KV cache's capacity (B_max) requests queue. Measured per second of the job, per replica:
- utilisation (a kernel running): prefill share + the time at least one sequence is active (1 - e^-B), less
  the CPU's scheduling gap between iterations;
- tensor activity: prefill's GEMMs, and in decode the GEMM share of an iteration (grows with the batch);
- SM activity: high in prefill, memory-bound decode kernels occupy most SMs, idle zero;
- power: prefill the full GEMM power (capped at the limit), decode the HBM-streaming power rising with the
  GEMM share, clocks-up idle between requests, deep idle (clocks down, 0x1) after a second without work:
  an idle replica drops to ~70-90 W;
- H200 replicas decode faster (memory-bound: 43% more bandwidth), prefill at the same speed, and hold more
  KV cache: with the same traffic they read lower activity and power.
Sampling as the exporters do: DCGM gauges average the interval, NVML utilisation is a 1/6 s or 1 s window
and power a 1 s window at the read (at a random phase of the bursty load), clocks and reasons are read at
an instant, temperature lags power, samples drop per node and per field.

Network. Little InfiniBand traffic: management and metrics; on some jobs KV-cache blocks shipped to other
nodes (prefix-cache offload, migrated sessions) in proportion to the node's prefill; weights pulled from a
peer node's host cache when a replica restarts. Per node, bursty, uncorrelated. NVLink carries the TP
all-reduces (per token per layer) where tp > 1.

No faults: replicas are independent, a slow replica only slows its own requests, nobody waits for it
(Case.synchronous False, faults []). Decoys (Case.decoys, as text; params['decoys'] as records), sized on
faulty-design seeds like the target slowdown (the replica's service time that much longer):
- a GPU with a lower clock (power limit lowered or SW thermal slowdown) in one replica: its prefill and the
  GEMMs of its decode slow; where tp > 1 its replica-mates wait for it in every layer's all-reduce
  (spinning: util high, SM and tensor activity low) - a straggler inside the replica, none in the job;
- a GPU whose memory stalls (normal clock, no reason bit): decode, memory-bound, slows the whole replica;
- a replica taking about 2x the load for minutes (a tenant pinned by session affinity);
- a replica restarting: down (deep idle), loading weights (copies: no kernels, power a little up, a peer
  node's NIC sending), warming up (graph capture), then ramped back in; its traffic goes to the others;
- mixed H100/H200 nodes, drifting balancer weights, long prompts, an exporter outage.
step_s = clean_step_s = the mean request latency (queueing + prefill + decode, seconds) over the requests
that arrived in the interval, all replicas together: serving has no steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import GPU_KEYS, NVLINK_KEYS, Case
from gpuscope.bench.workloads._common import design, draw_duration, draw_window, log_uniform_int, rng_for
from gpuscope.bench.workloads._engine import WAIT_TICK_HZ, as_telemetry, calibrate, port_counters, thermal_lag
from gpuscope.bench.workloads._gpu import COMPUTE, GPU_IDLE_BIT, H100, SW_POWER_CAP, SW_THERMAL, Electrical
from gpuscope.bench.workloads._gpu_models import H200, HBM_GB, HBM_TB_S, MixedFleet, electrical_mixed, mixed_fleet
from gpuscope.bench.workloads._held_out import scrape_interval

FAMILY = "serving"
FINE_CELLS = 1_200_000  # replicas x steps of the load model: long jobs of many replicas step coarser
DENSE_FLOPS = 989e12  # H100/H200 dense BF16 (FP8: twice)
# name, parameters (billions), bytes per parameter, layers, hidden size, KV-cache bytes per token
MODELS = (
    ("8B", 8.0, 2, 32, 4096, 131072),
    ("70B", 70.0, 2, 80, 8192, 327680),
    ("70B-fp8", 70.0, 1, 80, 8192, 163840),
    ("405B-fp8", 405.0, 1, 126, 16384, 258048),
)
# what a replica (its GPUs together) is doing: the shares of each second
PF, DEC, UP, DEEP, LOAD, WARM = range(6)
N_STATE = 6


@dataclass
class Replicas:
    """The engine of every replica (arrays over replicas J) and the traffic they are offered."""

    tp: int
    node: np.ndarray  # (J,)
    a_mem: np.ndarray  # s per decode iteration reading the weights
    a_fix: np.ndarray  # s per iteration that no clock or memory speeds up (launch, NVLink latency)
    b_kv: np.ndarray  # s per sequence per iteration reading its KV cache
    m: np.ndarray  # s per sequence per iteration of GEMM (tensor pipes busy)
    c_pf: np.ndarray  # s of prefill per prompt token
    b_max: np.ndarray  # sequences the KV cache holds
    gap: float  # s the CPU takes between iterations
    p_in: float  # mean prompt tokens
    p_out: float  # mean output tokens
    tau_pf: float  # tensor activity of prefill
    sm_dec: tuple[float, float]  # SM activity of decode at batch 1 and at a large batch
    dec_power: float  # decode's dynamic power at batch 1, as a share of dense GEMM power
    t_down: float  # s of idleness before the clocks drop
    tok_nvlink: float  # NVLink bytes per token per GPU (the TP all-reduces)
    kv_tok: float  # KV-cache bytes per token
    weights: float  # bytes of the model's weights

    @property
    def J(self) -> int:
        return len(self.node)

    def t_it(self, B: np.ndarray, f_mem: np.ndarray | float = 1.0, f_clk: np.ndarray | float = 1.0) -> np.ndarray:
        return (self.a_mem + self.b_kv * B) * f_mem + self.m * B * f_clk + self.a_fix

    def service(self, lam: np.ndarray, f_mem: np.ndarray | float = 1.0, f_clk: np.ndarray | float = 1.0) -> np.ndarray:
        """Mean seconds a request spends in prefill and decode at arrival rate lam (no queue)."""
        A = self.a_mem * f_mem + self.a_fix
        beta = self.b_kv * f_mem + self.m * f_clk
        B = np.clip(lam * self.p_out * A / np.maximum(1 - lam * self.p_out * beta, 1e-3), 0, self.b_max)
        return self.p_in * self.c_pf * f_clk + self.p_out * (self.t_it(B, f_mem, f_clk) + self.gap)


@dataclass
class Decoy:
    """Something uneven about one replica for a while, that is no fault of the job."""

    kind: str  # slow_clock, memory_stalls, hot_replica, restart
    replica: int
    start: float
    end: float
    gpu: int = -1  # rank, for the GPU decoys
    f_clk: float = 1.0  # the replica's GEMM time factor
    f_mem: float = 1.0  # its memory-bound time factor
    load: float = 1.0  # its balancer weight factor
    elec: Electrical | None = None
    phases: tuple[float, float, float] = (0.0, 0.0, 0.0)  # restart: loading, warm-up, back in
    slowdown: float = 0.0  # the replica's service time at its normal load, over the healthy one's, - 1
    text: str = ""
    peer: int = -1  # restart: the node whose host cache sends the weights (-1: storage)


# ---------------------------------------------------------------------------------------------------------
# drawing the deployment


def draw(rng: np.random.Generator) -> tuple[Replicas, MixedFleet, dict[str, object]]:
    nodes = log_uniform_int(rng, 2, 32)
    gpn = 8
    u = rng.random()
    if u < 0.5:
        node_kind, kinds = np.zeros(nodes, dtype=int), [H100]
    elif u < 0.65:
        node_kind, kinds = np.zeros(nodes, dtype=int), [H200]
    else:
        n_h200 = int(np.clip(round(nodes * rng.uniform(0.2, 0.8)), 1, max(nodes - 1, 1)))
        node_kind = rng.permutation(np.array([0] * (nodes - n_h200) + [1] * n_h200))
        kinds = [H100, H200] if nodes > 1 else [H100]
    mem_gain = {H100.name: 1.0, H200.name: float(rng.uniform(1.3, 1.43))}
    mf = mixed_fleet(rng, node_kind, kinds, gpn, mem_gain, alpha=0.85)
    name, params_b, bpp, layers, hidden, kv_tok = MODELS[int(rng.integers(len(MODELS)))]
    weights = params_b * 1e9 * bpp
    hbm_min = min(HBM_GB[k.name] for k in kinds) * 1e9
    tp = 1
    while weights / tp > 0.65 * hbm_min:
        tp *= 2
    if tp < gpn and rng.random() < 0.25:  # wider than needed, for latency
        tp *= 2
    reps = gpn // tp
    J = nodes * reps
    node = np.repeat(np.arange(nodes), reps)
    kind = np.array([kinds[int(node_kind[n])].name for n in node])
    bw = np.array([HBM_TB_S[k] for k in kind]) * 1e12 * rng.uniform(0.6, 0.8)
    flops = DENSE_FLOPS * (2 if bpp == 1 else 1) * rng.uniform(0.35, 0.6)
    p_in = float(np.exp(rng.uniform(np.log(300), np.log(3000))))
    p_out = float(np.exp(rng.uniform(np.log(100), np.log(800))))
    ctx = p_in + p_out / 2
    free = tp * (np.array([HBM_GB[k] for k in kind]) * 1e9 * 0.9 - weights / tp)
    r = Replicas(
        tp=tp,
        node=node,
        a_mem=weights / tp / bw,
        a_fix=np.full(J, 3e-4 + (2 * layers * rng.uniform(8e-6, 15e-6) if tp > 1 else 0.0)),
        b_kv=kv_tok * ctx / tp / bw,
        m=np.full(J, 2 * params_b * 1e9 / tp / flops),
        c_pf=np.full(J, 2 * params_b * 1e9 / tp / (flops * 1.3)),
        b_max=np.minimum(np.floor(free / (kv_tok * (p_in + p_out))), 256),
        gap=float(rng.uniform(3e-4, 2e-3)),
        p_in=p_in,
        p_out=p_out,
        tau_pf=float(rng.uniform(0.5, 0.75)),
        sm_dec=(float(rng.uniform(0.35, 0.55)), float(rng.uniform(0.7, 0.9))),
        dec_power=float(rng.uniform(0.25, 0.4)),
        t_down=float(rng.uniform(0.3, 2.0)),
        tok_nvlink=2 * layers * 2 * (tp - 1) / tp * hidden * 2,
        kv_tok=float(kv_tok),
        weights=weights,
    )
    info: dict[str, object] = {
        "model": name,
        "tp": tp,
        "replicas": J,
        "gpus": "+".join(k.name for k in kinds),
        "node_model": [kinds[int(k)].name for k in node_kind],
        "prompt_tokens": p_in,
        "output_tokens": p_out,
        "kv_capacity_seqs": r.b_max.tolist(),
    }
    return r, mf, info


def _capacity(r: Replicas) -> np.ndarray:
    """Requests per second a replica completes at its KV cache's full batch."""
    return 1.0 / (r.p_in * r.c_pf + r.p_out * (r.t_it(r.b_max) + r.gap) / r.b_max)


# ---------------------------------------------------------------------------------------------------------
# the offered load


def _shots(
    rng: np.random.Generator, t: np.ndarray, rate_per_s: float, dur: tuple[float, float], amp: tuple[float, float]
) -> np.ndarray:
    """A sum of bursts starting at Poisson times: each rises at once and decays over its own length."""
    out = np.zeros(len(t))
    dt = t[1] - t[0]
    for _ in range(int(rng.poisson(rate_per_s * (t[-1] - t[0])))):
        start = rng.uniform(t[0], t[-1])
        length = float(np.exp(rng.uniform(np.log(dur[0]), np.log(dur[1]))))
        i0 = int((start - t[0]) // dt)
        i1 = min(len(t), i0 + int(5 * length / dt) + 1)
        out[i0:i1] += rng.uniform(*amp) * np.exp(-(t[i0:i1] - t[i0]) / length)
    return out


def _smooth(x: np.ndarray, tau: np.ndarray, dt: float) -> np.ndarray:
    """First-order lag along time of each row (time constants tau per row)."""
    a = np.exp(-dt / tau)
    y = np.empty_like(x)
    cur = x[:, 0].copy()
    for i in range(x.shape[1]):
        cur = a * cur + (1 - a) * x[:, i]
        y[:, i] = cur
    return y


def _lindley(excess: np.ndarray) -> np.ndarray:
    """Backlog of a queue whose input minus capacity per step is `excess` (rows: queues)."""
    s = np.cumsum(excess, axis=1)
    return s - np.minimum(np.minimum.accumulate(s, axis=1), 0.0)


# ---------------------------------------------------------------------------------------------------------
# decoys


def _gpu_decoy(
    rng: np.random.Generator, r: Replicas, mf: MixedFleet, lam: float, j: int, target: float, kind: str
) -> Decoy | None:
    """A GPU of replica j slowed so that the replica's service time at its normal load is (1 + target)x."""
    rank = j * r.tp + int(rng.integers(r.tp))
    base = float(r.service(np.array([lam]))[j])
    clean = electrical_mixed(mf)
    if kind == "memory_stalls":

        def slow(x: float) -> float:
            return float(r.service(np.array([lam]), f_mem=1 + 6 * x)[j]) / base - 1

        x = calibrate(slow, target)
        if abs(slow(x) / target - 1) > 0.25:
            return None
        return Decoy(kind, j, 0, 0, gpu=rank, f_mem=1 + 6 * x, f_clk=1 + 0.1 * x, slowdown=slow(x))
    how = "power_cap" if rng.random() < 0.6 else "thermal"

    def elec_at(x: float) -> Electrical:
        return electrical_mixed(mf, how, rank, x)

    def slow_c(x: float) -> float:
        f_clk = float(clean.speed[rank] / elec_at(x).speed[rank])
        return float(r.service(np.array([lam]), f_clk=f_clk)[j]) / base - 1

    x = calibrate(slow_c, target)
    if abs(slow_c(x) / target - 1) > 0.25:
        return None
    e = elec_at(x)
    f_clk = float(clean.speed[rank] / e.speed[rank])
    return Decoy("slow_clock", j, 0, 0, gpu=rank, f_clk=f_clk, elec=e, slowdown=slow_c(x))


def draw_decoys(
    rng: np.random.Generator, r: Replicas, mf: MixedFleet, lam: float, target: float | None, duration: float
) -> list[Decoy]:
    """The strongest decoy (a replica slowed like the target) on faulty-design seeds; milder ones at random."""
    decoys: list[Decoy] = []
    used: set[int] = set()

    def replica() -> int:
        free = [j for j in range(r.J) if j not in used] or list(range(r.J))
        j = int(rng.choice(free))
        used.add(j)
        return j

    size = target if target is not None else (float(rng.uniform(0.03, 0.1)) if rng.random() < 0.4 else None)
    if size is not None:
        j = replica()
        kinds = ["slow_clock", "memory_stalls"]
        first = kinds[int(rng.integers(2))]
        d = _gpu_decoy(rng, r, mf, lam, j, size, first)
        if d is None:
            d = _gpu_decoy(rng, r, mf, lam, j, size, "memory_stalls")
        if d is not None:
            d.start, d.end = draw_window(rng, duration)
            decoys.append(d)
    if rng.random() < (0.6 if target is not None else 0.4):
        j = replica()
        start, end = draw_window(rng, duration)
        decoys.append(Decoy("hot_replica", j, start, end, load=float(rng.uniform(1.8, 2.5))))
    if r.J > 1 and rng.random() < (0.5 if target is not None else 0.3):
        j = replica()
        start = float(rng.uniform(600, duration - 900))
        down = start + float(rng.uniform(10, 60))
        loaded = down + float(rng.uniform(30, 240))
        warm = loaded + float(rng.uniform(15, 90))
        others = [n for n in range(int(r.node.max()) + 1) if n != r.node[j]]
        peer = int(rng.choice(others)) if others and rng.random() < 0.5 else -1
        decoys.append(Decoy("restart", j, start, warm, phases=(down, loaded, warm), peer=peer))
    return decoys


def _describe(d: Decoy, r: Replicas) -> str:
    where = f"replica {d.replica} (node {int(r.node[d.replica])})"
    span = f"{d.start:.0f}-{d.end:.0f} s"
    cost = f"replica {d.slowdown:+.0%} service time, {span}"
    if d.kind == "slow_clock":
        return f"slow_clock: GPU rank {d.gpu} of {where}: {d.elec.detail if d.elec else ''}; {cost}"
    if d.kind == "memory_stalls":
        return f"memory_stalls: GPU rank {d.gpu} of {where}: memory-bound kernels {d.f_mem:.2f}x slower; {cost}"
    if d.kind == "hot_replica":
        return f"hot_replica: {where} takes {d.load:.1f}x its share of the traffic (session affinity), {span}"
    src = f"node {d.peer}'s host cache" if d.peer >= 0 else "storage"
    return f"restart: {where} down, loads weights from {src}, warms up, back in, {span}"


# ---------------------------------------------------------------------------------------------------------
# the job


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    r, mf, info = draw(rng)
    nodes, gpn, J = len(mf.kind_of) // 8, 8, r.J
    R = nodes * gpn
    duration = draw_duration(rng)
    dt = scrape_interval(rng, R, duration)
    T = int(duration // dt)
    times = dt * (1.0 + np.arange(T))
    step = 1.0 if J * duration <= FINE_CELLS else (2.5 if J * duration / 2.5 <= FINE_CELLS else 5.0)
    k = round(dt / step)
    Tf = T * k
    tf = step * (0.5 + np.arange(Tf))  # mid-points of the load model's steps

    # how busy the deployment is: a replica's mean load, a share of what its KV cache can serve
    cap = _capacity(r)
    rho = float(np.exp(rng.uniform(np.log(0.03), np.log(0.5))))
    lam0 = rho * float(np.median(cap))
    decoys = draw_decoys(rng, r, mf, lam0, target, duration)

    # the stream: trend, job-wide bursts, balancer weights drifting, per-replica bursts
    per = rng.uniform(6 * 3600, 24 * 3600), rng.uniform(900, 3600)
    ph = rng.uniform(0, 2 * np.pi, 2)
    trend = np.exp(
        rng.uniform(0.15, 0.5) * np.sin(2 * np.pi * tf / per[0] + ph[0])
        + rng.uniform(0.0, 0.15) * np.sin(2 * np.pi * tf / per[1] + ph[1])
    )
    job_burst = 1.0 + _shots(rng, tf, 1 / rng.uniform(600, 1800), (5.0, 300.0), (0.2, 1.2))
    sigma_w = float(rng.uniform(0.05, 0.3))
    w = sigma_w * rng.standard_normal((J, 1))
    for _ in range(3):
        w = w + 0.5 * sigma_w * np.sin(
            2 * np.pi * tf[None, :] / rng.uniform(600, 3600, (J, 1)) + rng.uniform(0, 6.3, (J, 1))
        )
    weight = np.exp(w)
    kappa = float(rng.uniform(0, 1)) if rng.random() < 0.6 else 0.0  # load-aware balancer, or round robin
    weight *= (cap / np.median(cap))[:, None] ** kappa
    avail = np.ones((J, Tf))
    for d in decoys:
        on = (tf >= d.start) & (tf < d.end)
        if d.kind == "hot_replica":
            weight[d.replica, on] *= d.load
        elif d.kind == "restart":
            avail[d.replica, on] = 0.0
            back = (tf >= d.end) & (tf < d.end + 60)  # the balancer ramps it back in
            avail[d.replica, back] = (tf[back] - d.end) / 60
    share = weight * avail
    share = share / share.sum(axis=0, keepdims=True) * J
    lam = lam0 * trend * job_burst * share
    sessions = np.stack([_shots(rng, tf, 1 / rng.uniform(600, 2400), (30.0, 300.0), (0.5, 2.0)) for _ in range(J)])
    lam = lam * (1.0 + sessions * avail)
    n = rng.poisson(lam * step).astype(float)
    prompt = n * r.p_in * np.exp(rng.normal(0, 0.5, (J, Tf)) / np.sqrt(n + 1))
    long_rate = float(rng.uniform(2, 20)) / 3600
    n_long = rng.poisson(long_rate * step * avail)
    prompt += n_long * rng.uniform(8e3, 1.28e5, (J, Tf))  # a very long prompt: seconds of prefill

    # decoys slowing a replica
    f_clk = np.ones((J, Tf))
    f_mem = np.ones((J, Tf))
    for d in decoys:
        if d.kind in ("slow_clock", "memory_stalls"):
            on = (tf >= d.start) & (tf < d.end)
            f_clk[d.replica, on], f_mem[d.replica, on] = d.f_clk, d.f_mem

    # the engine: prefill first (chunked, at most 85% of the time), decode batches by Little's law
    pf_work = prompt * r.c_pf[:, None] * f_clk / step  # seconds of prefill per second
    pf_backlog = _lindley(pf_work - 0.85)
    u_pf = np.where(pf_backlog > 0, 0.85, np.minimum(pf_work, 0.85))
    rate = _smooth(n / step, r.p_out * r.t_it(0.3 * r.b_max) + 1.0, step)  # arrivals over a generation
    A = r.a_mem[:, None] * f_mem + r.a_fix[:, None]
    beta = r.b_kv[:, None] * f_mem + r.m[:, None] * f_clk
    occupancy = rate * r.p_out / np.maximum(1 - u_pf, 0.15)  # decode only runs outside prefill
    t_full = A + beta * r.b_max[:, None] + r.gap
    mu_max = r.b_max[:, None] / (r.p_out * t_full)  # completions per second with a full KV cache
    queue = _lindley((rate * (1 - u_pf) - mu_max * (1 - u_pf)) * step)  # requests waiting for KV space
    B = np.clip(occupancy * A / np.maximum(1 - occupancy * beta, 1e-3), 0.0, None)
    B = np.where((queue > 0) | (occupancy * beta >= 1 - 1e-3), r.b_max[:, None], np.minimum(B, r.b_max[:, None]))
    t_it = A + beta * B
    busy_dec = 1.0 - np.exp(-B)
    gap_share = r.gap / (t_it + r.gap)
    idle = (1 - u_pf) * (1 - busy_dec)
    deep = np.exp(-(rate + n_long / step) * r.t_down)  # share of idle time past the clock drop
    shares = np.zeros((N_STATE, J, Tf))
    shares[PF] = u_pf
    shares[DEC] = (1 - u_pf) * busy_dec * (1 - gap_share)
    shares[UP] = (1 - u_pf) * busy_dec * gap_share + idle * (1 - deep)
    shares[DEEP] = idle * deep
    gemm = r.m[:, None] * f_clk * B / t_it  # share of a decode iteration in GEMMs
    dec_level = r.dec_power + (0.95 - r.dec_power) * gemm
    sm_dec = r.sm_dec[0] + (r.sm_dec[1] - r.sm_dec[0]) * B / (B + 16)
    latency = (
        queue / np.maximum(mu_max, 1e-9)
        + pf_backlog / 0.85
        + r.p_in * r.c_pf[:, None] * f_clk
        + r.p_out * (t_it + r.gap) / np.maximum(1 - u_pf, 0.15)
    )
    for d in decoys:
        if d.kind == "restart":
            down, loaded, warm = d.phases
            for a0, a1, state in ((d.start, down, DEEP), (down, loaded, LOAD), (loaded, warm, WARM)):
                on = (tf >= a0) & (tf < a1)
                shares[:, d.replica, on] = 0.0
                shares[state, d.replica, on] = 1.0
    tokens = prompt + (shares[DEC] > 0) * B / np.maximum(t_it, 1e-9) * step * (1 - u_pf)

    # per interval: averages (DCGM), the last step (what an instant or a short window sees), latency
    def per_interval(x: np.ndarray) -> np.ndarray:
        return x.reshape(*x.shape[:-1], T, k).mean(axis=-1)

    tensor_rep = per_interval(shares[PF] * r.tau_pf + shares[DEC] * r.tau_pf * gemm + shares[WARM] * 0.05)
    sm_rep = per_interval(shares[PF] * 0.92 + shares[DEC] * sm_dec + shares[WARM] * 0.3)
    sh = per_interval(shares)
    dl = per_interval(shares[DEC] * dec_level)
    read = shares[..., k - 1 :: k]  # (S, J, T)
    read_dl = dec_level[:, k - 1 :: k]
    read_gemm = gemm[:, k - 1 :: k]
    arrivals = per_interval(n).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        step_s = np.where(arrivals > 0, per_interval(n * latency).sum(axis=0) / arrivals, np.nan)
    tok_rep = per_interval(tokens) * k  # tokens per interval

    case = _render(
        rng,
        r,
        mf,
        decoys,
        dt,
        times,
        sh,
        dl,
        read,
        read_dl,
        read_gemm,
        tensor_rep,
        sm_rep,
        tok_rep,
        per_interval(prompt) * k,
    )
    case.seed, case.duration_s = seed, duration
    case.step_s, case.clean_step_s = step_s, step_s.copy()
    case.decoys = [_describe(d, r) for d in decoys] + case.decoys + ["replica_imbalance", "bursty_traffic"]
    if "+" in str(info["gpus"]):
        case.decoys.append("mixed_h100_h200_nodes")
    case.params = {
        **info,
        "load": rho,
        "balancer_load_aware": kappa,
        "fine_step_s": step,
        "decoys": [
            {
                "kind": d.kind,
                "replica": d.replica,
                "gpu": d.gpu,
                "start": d.start,
                "end": d.end,
                "slowdown": d.slowdown,
                "load": d.load,
            }
            for d in decoys
        ],
        "target_slowdown_of_design": target,
    }
    return case


def _render(
    rng: np.random.Generator,
    r: Replicas,
    mf: MixedFleet,
    decoys: list[Decoy],
    dt: float,
    times: np.ndarray,
    sh: np.ndarray,  # (S, J, T) mean shares per interval
    dl: np.ndarray,  # (J, T) mean decode power level x decode share
    read: np.ndarray,  # (S, J, T) shares in the last step of the interval
    read_dl: np.ndarray,
    read_gemm: np.ndarray,
    tensor_rep: np.ndarray,
    sm_rep: np.ndarray,
    tok_rep: np.ndarray,
    prompt_rep: np.ndarray,
) -> Case:
    fleet = mf.fleet
    tp, J, T = r.tp, r.J, len(times)
    R = fleet.ranks
    gpn = fleet.gpus_per_node
    nodes = R // gpn
    rep = np.arange(R) // tp  # replica of each rank
    fmax = np.array([mf.kinds[int(k)].fmax for k in mf.kind_of])
    fidle = np.array([mf.kinds[int(k)].fidle for k in mf.kind_of])
    limit = np.array([mf.kinds[int(k)].limit_w for k in mf.kind_of])
    clean = electrical_mixed(mf)

    # electrical state per rank and interval: clean, or a GPU decoy's during its window
    f_pf = np.repeat(clean.clock_act[COMPUTE][:, None], T, axis=1)
    bits_pf = np.repeat(clean.bits_act[COMPUTE][:, None], T, axis=1)
    p_pf = np.repeat(clean.p_act[COMPUTE][:, None], T, axis=1)
    dec_scale = np.ones((R, T))  # decode power of a GPU stalled on memory
    f_dec = np.repeat(fmax[:, None], T, axis=1)
    bits_any = np.zeros((R, T), dtype=int)  # reasons whenever the GPU is busy (SW thermal)
    bits_dec = np.zeros((R, T), dtype=int)  # reasons while decoding (a lowered power limit)
    spin = np.zeros((R, T))  # share of its busy time a replica-mate waits in the all-reduce
    for d in decoys:
        if d.kind not in ("slow_clock", "memory_stalls"):
            continue
        on = (times > d.start) & (times - dt < d.end)
        g = d.gpu
        mates = np.array([q for q in range(d.replica * tp, (d.replica + 1) * tp) if q != g], dtype=int)
        if d.kind == "slow_clock" and d.elec is not None:
            f_pf[g, on], bits_pf[g, on], p_pf[g, on] = (
                d.elec.f_compute[g],
                d.elec.bits_act[COMPUTE, g],
                d.elec.p_act[COMPUTE, g],
            )
            thermal = bool(d.elec.sticky_bits[g] & SW_THERMAL)
            bits_any[g, on] = SW_THERMAL if thermal else 0
            if thermal:
                f_dec[g, on] = d.elec.f_compute[g]
            else:  # a lowered limit holds decode too, where decode asks for more than it
                head = max(float(d.elec.p_act[COMPUTE, g] - fleet.p_up[g]), 1.0)
                ask = fleet.demand[g] * read_dl[d.replica, on]
                f_dec[g, on] = fmax[g] * np.minimum(1.0, (head / ask) ** (1 / fleet.gamma))
                bits_dec[g, on] = np.where(ask > head, SW_POWER_CAP, 0)
            pf_w, dec_w = 1 - 1 / d.f_clk, 1 - 1 / (1 + (d.f_clk - 1) * read_gemm[d.replica, on])
        else:
            dec_scale[g, on] = 1 / (1 + 0.7 * (d.f_mem - 1))  # stalled SMs switch less
            pf_w, dec_w = 1 - 1 / d.f_clk, 1 - 1 / d.f_mem
        if len(mates):
            busy = sh[PF, d.replica, on] + sh[DEC, d.replica, on]
            spin[np.ix_(mates, np.nonzero(on)[0])] = (
                pf_w * sh[PF, d.replica, on] + dec_w * sh[DEC, d.replica, on]
            ) / np.maximum(busy, 1e-9)

    demand = fleet.demand[:, None]
    p_up, p_deep = fleet.p_up[:, None], fleet.p_deep[:, None]
    p_light, p_spin = fleet.p_light[:, None], fleet.p_spin[:, None]

    def power_of(s: np.ndarray, level: np.ndarray) -> np.ndarray:
        """Mean power of ranks whose replica spends shares s (S, R, T) of the time in each state."""
        compute = s[PF] * p_pf + s[DEC] * p_up + level * demand * dec_scale
        busy = s[PF] + s[DEC]
        waiting = spin * busy
        return (
            compute * (1 - spin)
            + waiting * p_spin
            + s[UP] * (p_up + 25.0)
            + s[DEEP] * p_deep
            + s[LOAD] * (p_up + 40.0)
            + s[WARM] * p_light
        )

    s_mean = sh[:, rep]
    p_mean = np.minimum(power_of(s_mean, dl[rep]), limit[:, None])
    tensor = tensor_rep[rep] * (1 - spin)
    sm = sm_rep[rep] * (1 - spin) + spin * (s_mean[PF] + s_mean[DEC]) * fleet.sm_nccl

    # the read: one state per replica (its GPUs together) at an instant of the last step
    s_read = read[:, rep]
    cum = np.cumsum(read, axis=0)
    u = rng.random((J, T))
    state = np.minimum((u[None] > cum).sum(axis=0), N_STATE - 1)[rep]  # (R, T)
    theta_u = 0.85 if rng.random() < 0.5 else 0.6  # NVML's 1/6 s window sees one state; a 1 s one, a mix
    onehot = np.zeros_like(s_read)
    np.put_along_axis(onehot, state[None], 1.0, axis=0)
    busy_read = onehot[PF] + onehot[DEC] + onehot[WARM]
    busy_mean = s_read[PF] + s_read[DEC] + 0.7 * s_read[WARM]
    util = 100 * (theta_u * busy_read + (1 - theta_u) * busy_mean)
    util = util * (1 - rng.uniform(0.0, 0.04, (R, 1)) * (onehot[DEC] > 0))
    theta_p = 0.7
    p_read = theta_p * power_of(onehot, onehot[DEC] * read_dl[rep]) + (1 - theta_p) * power_of(
        s_read, s_read[DEC] * read_dl[rep]
    )
    p_read = np.minimum(p_read, limit[:, None])
    copying = np.where(rng.random((R, T)) < 0.5, fmax[:, None], fidle[:, None])  # copies only: clocks up or not
    clock = np.select(
        [state == PF, state == DEC, state == DEEP, state == LOAD], [f_pf, f_dec, fidle[:, None], copying], fmax[:, None]
    )
    clock = np.broadcast_to(clock, (R, T)).astype(float)
    bits = np.where(state == PF, bits_pf, 0) | np.where(state == DEEP, GPU_IDLE_BIT, 0)
    bits = bits | np.where((state == PF) | (state == DEC), bits_any, 0) | np.where(state == DEC, bits_dec, 0)
    capped = (bits & SW_POWER_CAP) != 0
    clock = clock * np.where(capped, 1.0 + rng.normal(0, 0.012, (R, T)), 1.0)
    clock = np.minimum(np.round(clock / 15.0) * 15.0, fmax[:, None])

    # temperature: a lag of the interval's mean power
    temp = thermal_lag(fleet, p_mean, dt)
    for d in decoys:  # a GPU held by its SW thermal slowdown sits at its slowdown temperature
        if d.kind == "slow_clock" and d.elec is not None and np.isfinite(d.elec.thermal_c[d.gpu]):
            on = (times > d.start) & (times - dt < d.end)
            temp[d.gpu, on] = np.maximum(temp[d.gpu, on], d.elec.thermal_c[d.gpu] + rng.normal(0, 0.8, int(on.sum())))
    temp = np.round(temp + rng.normal(0, 0.4, (R, T)))

    noise = float(rng.uniform(0.01, 0.05))
    power = np.round(
        np.clip(
            p_read * rng.normal(1.0, 0.015, (R, 1)) * (1 + rng.normal(0, 0.02, (R, T))),
            0.5 * fleet.p_deep.min(),
            1.04 * limit[:, None],
        ),
        2,
    )
    tensor = np.clip(100 * tensor * (1 + rng.normal(0, noise, (R, T))), 0, 100)
    sm = np.clip(np.maximum(100 * sm * (1 + rng.normal(0, noise, (R, T))), tensor), 0, 100)
    util = np.round(np.clip(util + rng.normal(0, 1.5, (R, T)) * (util > 0.5), 0, 100))

    # NVLink: the TP all-reduces, per token, on every GPU of the replica
    nv = tok_rep[rep] * r.tok_nvlink * (1 + rng.normal(0, 0.02, (R, T)))
    nv = np.maximum(nv, 0) + dt * 2e4 * rng.random((R, T))  # link management traffic
    nvlink_tx = np.floor(rng.uniform(1e12, 1e15, R)[:, None] + np.cumsum(nv, axis=1))
    errors = {key: np.repeat(rng.poisson(0.3, (R, 1)).astype(float), T, axis=1) for key in NVLINK_KEYS[1:]}

    # InfiniBand: management, KV blocks shipped away with the node's prefill, weights sent to a restarting peer
    link = 400.0 if rng.random() < 0.7 else 200.0
    rate_b = link * 1e9 / 8
    node_of_rep = r.node
    kv_share = float(rng.uniform(0.02, 0.2)) if rng.random() < 0.35 else 0.0
    node_prompt = np.zeros((nodes, T))
    np.add.at(node_prompt, node_of_rep, prompt_rep)
    kv_bytes = kv_share * node_prompt * r.kv_tok * np.exp(rng.normal(0, 0.7, (nodes, T)) - 0.245)
    sent = dt * rng.uniform(1e5, 5e5, (nodes, 1)) * np.exp(rng.normal(0, 0.4, (nodes, T))) + kv_bytes
    wait_base = rng.uniform(0.002, 0.03, (nodes, 1))
    waited = sent / rate_b * wait_base + kv_bytes / rate_b * rng.uniform(0.05, 0.3)  # incast at the receivers
    for d in decoys:
        if d.kind == "restart":
            down, loaded, _ = d.phases
            on = (times > down) & (times - dt < loaded)
            total = r.weights if d.peer >= 0 else 0.01 * r.weights  # from a peer's host cache, or read requests
            src = d.peer if d.peer >= 0 else int(r.node[d.replica])
            sent[src, on] += total / max(int(on.sum()), 1)
            waited[src, on] += total / max(int(on.sum()), 1) / rate_b * 0.05
    xmit_bytes, xmit_wait = port_counters(rng, sent, waited * WAIT_TICK_HZ)

    gpu = (tensor, sm, util, power, clock, bits.astype(float), temp)
    telemetry = {
        **as_telemetry(gpu, (xmit_bytes, xmit_wait, np.full((nodes, T), link))),
        "nvlink_tx_bytes": nvlink_tx,
        **errors,
    }
    outage = _drop(rng, telemetry, nodes, gpn, T, dt)
    return Case(
        family=FAMILY,
        seed=-1,
        nodes=nodes,
        gpus_per_node=gpn,
        sample_s=dt,
        duration_s=0.0,
        times=times,
        telemetry=telemetry,
        port_node=np.arange(nodes),
        port_gpu=np.full(nodes, -1),
        faults=[],
        step_s=np.zeros(T),
        clean_step_s=np.zeros(T),
        decoys=["exporter_outage"] if outage else [],
        synchronous=False,
    )


def _drop(rng: np.random.Generator, tel: dict[str, np.ndarray], nodes: int, gpn: int, T: int, dt: float) -> bool:
    """Missed scrapes per node (GPUs and NIC together), sometimes minutes of one exporter, single fields."""
    rate = float(rng.uniform(0.002, 0.02))
    missed = rng.random((nodes, T)) < rate
    outage = nodes > 2 and rng.random() < 0.3
    if outage:
        start = int(rng.integers(T))
        missed[int(rng.integers(nodes)), start : start + max(1, int(rng.uniform(60, 600) / dt))] = True
    rank_node = np.repeat(np.arange(nodes), gpn)
    for key, arr in tel.items():
        rows = rank_node if key in GPU_KEYS or key in NVLINK_KEYS else np.arange(nodes)
        arr[missed[rows] | (rng.random(arr.shape) < rate * 0.1)] = np.nan
    return outage
