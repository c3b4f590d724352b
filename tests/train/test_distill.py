"""Knowledge distillation in ``nas-train`` (``distill``): Hinton et al.'s loss at float64, runs
with a teacher from a nas-train checkpoint, a genotype with weights and torchvision, resume,
and the one-line refusals."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import hooked_cli
import pytest
import torch
from omegaconf import OmegaConf

from nas.training.distill import DistillError, load_teacher, soft_target_loss


def events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


# ------------------------------------------------------------------------------ the loss


def _hinton(student: list[list[float]], teacher: list[list[float]], T: float) -> float:
    """Section 2 of the paper, element by element in Python floats: the batch mean of
    C = -sum_i p_i log q_i, p = softmax(teacher / T), q = softmax(student / T), times T^2."""
    total = 0.0
    for s_row, t_row in zip(student, teacher, strict=True):
        zs = sum(math.exp(v / T) for v in s_row)
        zt = sum(math.exp(v / T) for v in t_row)
        p = [math.exp(v / T) / zt for v in t_row]
        log_q = [v / T - math.log(zs) for v in s_row]
        total += -sum(pi * lq for pi, lq in zip(p, log_q, strict=True))
    return T * T * total / len(student)


@pytest.mark.parametrize("T", [1.0, 2.0, 4.0])
def test_kd_loss_is_hintons_formula_at_float64(T):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(5, 7, dtype=torch.float64, generator=g) * 3
    t = torch.randn(5, 7, dtype=torch.float64, generator=g) * 3
    s.requires_grad_(True)
    loss = soft_target_loss(s, t, temperature=T)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(_hinton(s.tolist(), t.tolist(), T), rel=1e-13)
    # the gradient of the paper: dC/dz_i = (q_i - p_i) / T, times T^2, over a batch of 5
    loss.backward()
    q, p = torch.softmax(s.detach() / T, 1), torch.softmax(t / T, 1)
    assert torch.allclose(s.grad, T * (q - p) / 5, rtol=0, atol=1e-15)
    # without the T^2 factor, and at T = 1 once-for-all's cross-entropy with a soft target
    unscaled = soft_target_loss(s, t, temperature=T, scale_t2=False)
    assert unscaled.item() == pytest.approx(loss.item() / T**2, rel=1e-13)
    ofa = torch.mean(torch.sum(-torch.softmax(t, 1) * torch.log_softmax(s, 1), 1))
    assert soft_target_loss(s, t, temperature=1.0).item() == pytest.approx(ofa.item(), rel=1e-15)


def test_kd_loss_of_a_student_equal_to_its_teacher_is_the_teachers_entropy():
    t = torch.tensor([[2.0, -1.0, 0.5]], dtype=torch.float64)
    p = torch.softmax(t / 3, 1)
    entropy = -(p * p.log()).sum().item()
    assert soft_target_loss(t, t, temperature=3.0).item() == pytest.approx(9 * entropy)


# ------------------------------------------------------------------------------ runs

KD = ["distill.weight=0.5", "distill.temperature=2.0"]


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, tiny) -> Path:
    """A finished 1-epoch tiny run (DARTS_V2, C=4, 3 cells): the teacher of the runs below."""
    from nas.cli.train import compose_config
    from nas.training import run_train

    run_dir = tmp_path_factory.mktemp("kd") / "teacher"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_train(compose_config([*tiny, "epochs=1"]), run_dir)
    finally:
        torch.set_num_threads(threads)
    return run_dir


@pytest.fixture(scope="module")
def student_run(tmp_path_factory, tiny, teacher_run) -> Path:
    """2 epochs distilled from ``teacher_run``: the reference of the resume test."""
    from nas.cli.train import compose_config
    from nas.training import run_train

    run_dir = tmp_path_factory.mktemp("kd") / "student"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = compose_config([*tiny, "epochs=2", f"distill.teacher={teacher_run}", *KD])
        run_train(cfg, run_dir)
    finally:
        torch.set_num_threads(threads)
    return run_dir


def test_a_run_with_a_teacher_checkpoint_trains_and_logs_the_parts(student_run, teacher_run):
    steps = events(student_run, "step")
    assert [e["step"] for e in steps] == list(range(1, 9))
    for e in steps:  # the logged total is CE + weight x KD
        assert e["train_loss"] == pytest.approx(e["train_ce"] + 0.5 * e["train_kd"], rel=1e-5)
        assert e["train_kd"] > 0 and e["train_ce"] > 0
    epochs = events(student_run, "epoch")
    assert [e["epoch"] for e in epochs] == [0, 1]
    for e in epochs:
        assert e["train_loss"] == pytest.approx(e["train_ce"] + 0.5 * e["train_kd"], rel=1e-5)
        assert "test_top1" in e
    model = events(student_run, "model")[0]
    last = teacher_run / "checkpoints" / "last.pt"
    assert model["teacher"] == f"NetworkCIFAR(C=4, layers=3, auxiliary) from {last}"
    results = json.loads((student_run / "results.json").read_text())
    assert results["teacher"] == model["teacher"]
    assert results["final"]["train_kd"] == epochs[-1]["train_kd"]
    state = torch.load(student_run / "checkpoints" / "last.pt", weights_only=False)
    assert state["config"]["distill"]["teacher"] == str(teacher_run)
    assert state["distill_sums"].shape == (2,)


def test_the_teacher_sees_the_students_batch_in_eval_mode_without_gradients(
    tmp_path, tiny, teacher_run, one_thread
):
    from nas.cli.train import compose_config
    from nas.training.loop import TrainRun

    run = TrainRun(compose_config([*tiny, f"distill.teacher={teacher_run}", *KD]), tmp_path / "r")
    teacher = run.teacher
    assert teacher is not None and not teacher.net.training
    assert not any(p.requires_grad for p in teacher.net.parameters())
    before = {k: v.clone() for k, v in teacher.net.state_dict().items()}
    seen: dict[str, torch.Tensor] = {}
    teacher.net.register_forward_pre_hook(lambda m, args: seen.setdefault("teacher", args[0]))
    run.net.register_forward_pre_hook(lambda m, args: seen.setdefault("student", args[0]))
    x, y = next(iter(run.train_loader))
    out = run._train_step(*run._to_device(x, y))
    assert seen["teacher"] is seen["student"]  # the same tensor: same images, augmentation
    assert out.shape == (3,) and out[0].item() == pytest.approx(
        out[1].item() + 0.5 * out[2].item(), rel=1e-6
    )
    after = teacher.net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # batch-norm statistics too


@pytest.mark.slow
def test_sigterm_mid_epoch_then_resume_equals_the_uninterrupted_distilled_run(
    tmp_path, tiny, nas_train, teacher_run, student_run
):
    run_dir = tmp_path / "stopped"
    args = [*tiny, "epochs=2", f"distill.teacher={teacher_run}", *KD]
    proc = hooked_cli.start("train", *args, f"hydra.run.dir={run_dir}", pause_at_step=6)
    hooked_cli.wait_paused(proc)
    proc.send_signal(15)
    _, err = hooked_cli.release(proc)
    assert proc.returncode == 143, err
    resumed = nas_train(run_dir, "epochs=2", f"distill.teacher={teacher_run}", *KD, "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a = torch.load(student_run / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    for key in ("train_loss", "train_ce", "train_kd", "test_loss", "test_top1"):
        assert a["final"][key] == b["final"][key], key
    steps = [(e["step"], e["train_kd"]) for e in events(run_dir, "step")]
    assert steps == [(e["step"], e["train_kd"]) for e in events(student_run, "step")]
    # another temperature is another run
    proc = nas_train(run_dir, "epochs=2", f"distill.teacher={teacher_run}", "distill.weight=0.5",
                     "distill.temperature=3.0", "resume=true")  # fmt: skip
    assert proc.returncode == 2 and "distill.temperature 2.0 -> 3.0" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- teachers


def _distill(**values) -> object:
    base = {"teacher": None, "weights": None, "weight": 1.0, "temperature": 1.0, "scale_t2": True}
    return OmegaConf.create({**base, **values})


MODEL = OmegaConf.create({"darts": {"C": 4, "layers": 3}, "nb201": {"C": 4, "N": 1},
                          "auxiliary": True, "auxiliary_weight": 0.4, "drop_path": 0.0})  # fmt: skip


def _load(distill, num_classes: int = 10):
    return load_teacher(distill, MODEL, num_classes=num_classes, image_size=32,
                        data_name="cifar10-mini", device=torch.device("cpu"),
                        channels_last=False)  # fmt: skip


def test_a_genotype_teacher_takes_its_weights_from_a_run_or_a_state_dict(tmp_path, teacher_run):
    x = torch.randn(4, 3, 32, 32)
    reference = _load(_distill(teacher=str(teacher_run)))
    state = torch.load(teacher_run / "checkpoints" / "last.pt", weights_only=False)
    torch.save(state["model"], tmp_path / "weights.pt")
    from_file = _load(_distill(teacher="DARTS_V2", weights=str(tmp_path / "weights.pt")))
    from_run = _load(_distill(teacher="DARTS_V2", weights=str(teacher_run)))
    assert from_file.description.startswith("DARTS_V2 (NetworkCIFAR(C=4, layers=3, auxiliary))")
    for teacher in (from_file, from_run):
        assert torch.equal(teacher.logits(x), reference.logits(x))
    with pytest.raises(DistillError, match=r"^distill.weights=.* trained the genotype Genotype"):
        _load(_distill(teacher="DARTS_V1", weights=str(teacher_run)))
    with pytest.raises(DistillError, match="names a genotype, whose trained weights are not"):
        _load(_distill(teacher="DARTS_V2"))
    with pytest.raises(DistillError, match=r"do not fit the teacher network \(.*size mismatch"):
        _load(_distill(teacher="DARTS_V2", weights=str(tmp_path / "weights.pt")), num_classes=7)
    search = tmp_path / "search"
    search.mkdir()
    (search / "genotype.json").write_text("{}")
    with pytest.raises(DistillError, match="is a nas-search run folder: it holds a genotype"):
        _load(_distill(teacher=str(search)))
    with pytest.raises(DistillError, match=r"was trained on cifar10-mini \(10 classes\)"):
        _load(_distill(teacher=str(teacher_run)), num_classes=100)


def test_a_torchvision_teacher_from_a_file_trains_a_student(tmp_path, tiny, one_thread):
    import torchvision

    from nas.cli.train import compose_config
    from nas.training import run_train

    net = torchvision.models.get_model("resnet18", num_classes=10)
    torch.save(net.state_dict(), tmp_path / "resnet18.pt")
    teacher = _load(_distill(teacher="torchvision:resnet18", weights=str(tmp_path / "resnet18.pt")))
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(teacher.logits(x), net.eval()(x))
    overrides = [*tiny, "epochs=1", "distill.teacher=torchvision:resnet18",
                 f"distill.weights={tmp_path / 'resnet18.pt'}", "distill.weight=1.0"]  # fmt: skip
    result = run_train(compose_config(overrides), tmp_path / "run")
    assert result.results["teacher"].startswith("torchvision:resnet18 with the weights of")
    assert result.results["final"]["train_kd"] > 0


def test_torchvision_weights_come_from_the_cache_or_are_refused(tmp_path, monkeypatch):
    import torchvision

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    entry = torchvision.models.ResNet18_Weights.IMAGENET1K_V1
    cached = tmp_path / "hub" / "checkpoints" / Path(entry.url).name
    spec = _distill(teacher="torchvision:resnet18", weights="DEFAULT")
    with pytest.raises(DistillError, match=r"is not in torch's cache .* nothing is downloaded"):
        _load(spec, num_classes=1000)
    with pytest.raises(DistillError, match="classifies 1000 classes; the data has 10"):
        _load(spec)
    net = torchvision.models.get_model("resnet18", num_classes=1000)
    cached.parent.mkdir(parents=True)
    torch.save(net.state_dict(), cached)
    teacher = _load(spec, num_classes=1000)
    assert teacher.description == f"torchvision:resnet18 with {entry} ({cached})"
    x = torch.randn(1, 3, 64, 64)
    assert torch.equal(teacher.logits(x), net.eval()(x))
    with pytest.raises(DistillError, match="resnet18 has no torchvision weights 'V9'; expected"):
        _load(_distill(teacher="torchvision:resnet18", weights="V9"), num_classes=1000)
    with pytest.raises(DistillError, match="needs distill.weights: a state_dict file, or a"):
        _load(_distill(teacher="torchvision:resnet18"))
    with pytest.raises(DistillError, match="torchvision has no model 'resnet5'"):
        _load(_distill(teacher="torchvision:resnet5", weights="DEFAULT"))


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["distill.weight=0.5"], "distill.weight=0.5 does not apply without distill.teacher"),
        (["distill.temperature=4"], "distill.temperature=4 does not apply without distill"),
        (["distill.weights=w.pt"], "distill.weights=w.pt does not apply without distill"),
        (["distill.teacher=DARTS_V2"], "distill.teacher=DARTS_V2 is not used with distill"),
        (["distill.teacher=DARTS_V2", "distill.weight=-1"], "distill.weight must be a number"),
        (
            ["distill.teacher=DARTS_V2", "distill.weight=1", "distill.temperature=0"],
            r"distill.temperature must be a number > 0, got 0",
        ),  # fmt: skip
    ],
)
def test_settings_that_do_not_apply_are_refused_before_torch(tmp_path, tiny, overrides, message):
    import os
    import subprocess
    import sys

    fake = tmp_path / "no_torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch imported before the check')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), os.getcwd(),
                                                       os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    cmd = [sys.executable, "-m", "nas.cli.train", *tiny, *overrides, f"hydra.run.dir={tmp_path}/r"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(message, lines[0]), proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_teacher_without_weights_is_one_line_and_exit_2(tmp_path, nas_train):
    for overrides, message in [
        (["distill.teacher=DARTS_V2"], "names a genotype, whose trained weights are not"),
        (["distill.teacher=torchvision:resnet18"], "needs distill.weights"),
        ([f"distill.teacher={tmp_path}/none"], "no nas-train checkpoint at"),
    ]:
        proc = nas_train(tmp_path / "r", "epochs=1", "distill.weight=1", *overrides)
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("nas-train: error: distill."), lines
        assert message in lines[0]
        assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_two_processes_each_hold_their_teacher(tmp_path, tiny, nas_train, teacher_run):
    """Under torchrun each rank distils its half of the batch from its own teacher: the step-1
    parts match the single process's up to per-rank batch-norm statistics (see
    test_train_distributed.py), and the logged parts are summed over the ranks."""
    from nas.cli.train import compose_config
    from nas.training import run_train

    same = ["epochs=1", "augment=false", "model.drop_path=0", f"distill.teacher={teacher_run}",
            *KD]  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_train(compose_config([*tiny, *same]), tmp_path / "one")
    finally:
        torch.set_num_threads(threads)
    two = nas_train(tmp_path / "two", *same, nproc=2)
    assert two.returncode == 0, two.stderr
    a, b = events(tmp_path / "one", "step"), events(tmp_path / "two", "step")
    assert [e["step"] for e in a] == [e["step"] for e in b] == [1, 2, 3, 4]
    assert b[0]["train_kd"] == pytest.approx(a[0]["train_kd"], rel=0.01)
    assert b[0]["train_ce"] == pytest.approx(a[0]["train_ce"], rel=0.01)
    ea, eb = events(tmp_path / "one", "epoch")[0], events(tmp_path / "two", "epoch")[0]
    assert eb["train_kd"] == pytest.approx(ea["train_kd"], rel=0.03)
