"""The loop options every recipe can use, added for ProxylessNAS's ImageNet recipe
(``experiment=proxyless_imagenet``): parameters kept out of weight decay, a schedule set every
step, Nesterov momentum, four colour-jitter factors; tried on the DARTS and NB201 networks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import hooked_cli
import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from nas.training import build_network, resolve_train_genotype
from nas.training.loop import TrainError, _step_schedule, parameter_groups, validate_config

NB201_ARCH = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def _names(net: nn.Module, params: list[torch.Tensor]) -> set[str]:
    ids = {id(p) for p in params}
    return {n for n, p in net.named_parameters() if id(p) in ids}


# ------------------------------------------------------------------------- weight decay


@pytest.mark.parametrize(("genotype", "layers"), [("DARTS_V2", 3), (NB201_ARCH, 1)])
def test_no_weight_decay_groups_pick_batch_norm_and_biases(genotype, layers):
    net, _ = build_network(resolve_train_genotype(genotype), num_classes=10, image_size=32,
                           C=4, layers=layers, auxiliary=False)  # fmt: skip
    everything = {n for n, _ in net.named_parameters()}
    bn = {f"{m}.{p}" for m, mod in net.named_modules() if isinstance(mod, nn.BatchNorm2d)
          for p, _ in mod.named_parameters(recurse=False)}  # fmt: skip
    biases = {n for n in everything if n.endswith(".bias")}
    assert bn and biases - bn == {"classifier.bias"}
    (one,) = parameter_groups(net, 3e-4, [])
    assert one["weight_decay"] == 3e-4 and _names(net, one["params"]) == everything
    for exempt, skipped in ((["bn"], bn), (["bias"], biases), (["bn", "bias"], bn | biases)):
        decay, no_decay = parameter_groups(net, 3e-4, exempt)
        assert (decay["weight_decay"], no_decay["weight_decay"]) == (3e-4, 0.0)
        assert _names(net, no_decay["params"]) == skipped
        assert _names(net, decay["params"]) == everything - skipped


def test_an_optimiser_step_decays_only_the_other_parameters(tmp_path, tiny, one_thread):
    from nas.cli.train import compose_config
    from nas.training.loop import TrainRun

    cfg = compose_config([*tiny, f"genotype={NB201_ARCH}", "model.nb201.C=4", "model.nb201.N=1",
                          "optimizer.no_weight_decay=[bn]", "optimizer.weight_decay=0.1",
                          "optimizer.nesterov=true"])  # fmt: skip
    run = TrainRun(cfg, tmp_path / "r")
    group = run.optimizer.param_groups
    assert [g["weight_decay"] for g in group] == [0.1, 0.0] and group[0]["nesterov"]
    before = {n: p.detach().clone() for n, p in run.net.named_parameters()}
    for p in run.net.parameters():  # a zero gradient: only weight decay moves a weight
        p.grad = torch.zeros_like(p)
    run.optimizer.step()
    bn = _names(run.net, group[1]["params"])
    assert bn == {f"{m}.{p}" for m, mod in run.net.named_modules()
                  if isinstance(mod, nn.BatchNorm2d) for p, _ in mod.named_parameters(recurse=False)}  # fmt: skip
    for n, p in run.net.named_parameters():
        if n in bn:
            assert torch.equal(p, before[n]), n
        else:  # Nesterov SGD, first step, gradient 0: p (1 - lr (1 + momentum) wd)
            assert torch.allclose(p, before[n] * (1 - 0.025 * 1.9 * 0.1)), n


# ------------------------------------------------------------------------ per-step lr


def test_per_step_cosine_is_proxylessnas_schedule():
    from nas.cli.train import compose_config

    cfg = compose_config(["optimizer.lr=0.05", "optimizer.lr_per_step=true"])
    epochs, n = 3, 7
    f = _step_schedule(cfg, epochs, n)
    total = epochs * n
    for t in range(total):  # run_manager.py _calc_learning_rate: 0.5 lr (1 + cos(pi t / T))
        expected = 0.5 * 0.05 * (1 + math.cos(math.pi * t / total))
        assert 0.05 * f(t) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    warm = _step_schedule(compose_config(["optimizer.warmup_epochs=1"]), epochs, n)
    assert [warm(t) for t in range(n)] == pytest.approx([(t + 1) / n for t in range(n)])
    assert warm(n) == pytest.approx((1 + math.cos(math.pi * 1 / 3)) / 2)
    step = _step_schedule(compose_config(["optimizer.schedule=step"]), epochs, n)
    assert [step(t) for t in range(total)] == pytest.approx(
        [0.97 ** (t // n) for t in range(total)]
    )  # a staircase stays a staircase


PER_STEP = ["epochs=2", "optimizer.lr_per_step=true"]


@pytest.fixture(scope="module")
def per_step_run(tmp_path_factory, tiny) -> Path:
    from nas.cli.train import compose_config
    from nas.training import run_train

    run_dir = tmp_path_factory.mktemp("per_step") / "full"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_train(compose_config([*tiny, *PER_STEP]), run_dir)
    finally:
        torch.set_num_threads(threads)
    return run_dir


def test_a_per_step_run_logs_each_steps_rate(per_step_run):
    steps = events(per_step_run, "step")
    assert [e["step"] for e in steps] == list(range(1, 9))  # 4 steps per epoch, 2 epochs
    expected = [0.025 * (1 + math.cos(math.pi * s / 8)) / 2 for s in range(8)]
    assert [e["lr"] for e in steps] == pytest.approx(expected, rel=1e-12)
    assert [e["lr"] for e in events(per_step_run, "epoch")] == pytest.approx(expected[::4])


@pytest.mark.slow
def test_a_per_step_run_resumes_exactly_and_refuses_a_new_total(
    tmp_path, tiny, nas_train, per_step_run
):
    from nas.cli.train import compose_config
    from nas.training.loop import TrainRun

    run_dir = tmp_path / "stopped"
    proc = hooked_cli.start("train", *tiny, *PER_STEP, f"hydra.run.dir={run_dir}", pause_at_step=6)
    hooked_cli.wait_paused(proc)
    proc.send_signal(15)
    _, err = hooked_cli.release(proc)
    assert proc.returncode == 143, err
    resumed = nas_train(run_dir, *PER_STEP, "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a = torch.load(per_step_run / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert [(e["step"], e["lr"]) for e in events(run_dir, "step")] == [
        (e["step"], e["lr"]) for e in events(per_step_run, "step")
    ]
    cfg = compose_config([*tiny, "epochs=3", "optimizer.lr_per_step=true", "resume=true"])
    with pytest.raises(TrainError, match=r"epochs=3 would change epoch 1 .*last-step learning"):
        TrainRun(cfg, per_step_run)


def test_a_checkpoint_written_before_the_options_existed_resumes(tmp_path, tiny, per_step_run):
    import shutil

    from nas.cli.train import compose_config
    from nas.training.loop import TrainRun

    run_dir = tmp_path / "old"
    shutil.copytree(per_step_run, run_dir)
    ckpt = run_dir / "checkpoints" / "last.pt"
    state = torch.load(ckpt, weights_only=False)
    del state["config"]["distill"], state["config"]["optimizer"]["no_weight_decay"]
    torch.save(state, ckpt)
    TrainRun(compose_config([*tiny, *PER_STEP, "resume=true"]), run_dir)  # no refusal
    cfg = compose_config([*tiny, *PER_STEP, "resume=true", "optimizer.no_weight_decay=[bn]"])
    with pytest.raises(TrainError, match=r"optimizer.no_weight_decay \[\] -> \['bn'\]"):
        TrainRun(cfg, run_dir)


# ------------------------------------------------------------------------ colour jitter


def _image_folder(root: Path, per_class: int) -> Path:
    rng = np.random.default_rng(0)
    for c, name in enumerate(["cat", "dog", "fox"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 80, (40 + 8 * (i % 3), 48, 3), dtype=np.uint8)
            pixels[..., c] += 170
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("images")
    train, val = _image_folder(root / "train", 8), _image_folder(root / "val", 2)
    return ["data=imagefolder", f"data.root={train}", f"data.val_root={val}", "data.num_workers=0"]


def test_four_colour_jitter_factors_replace_the_default_jitter(folders):
    from torchvision import transforms as T

    from nas.cli.train import compose_config
    from nas.training.loop import _train_set

    def jitter(*overrides: str) -> list[T.ColorJitter]:
        data = _train_set(compose_config([*folders, *overrides]))
        while not hasattr(data, "transform"):  # an image folder in a fixed random order
            data = data.dataset  # type: ignore[attr-defined]
        transform = data.transform
        return [t for t in transform.transforms if isinstance(t, T.ColorJitter)]

    (default,) = jitter("data.image_size=96", "data.color_jitter=true")
    assert default.hue == (-0.2, 0.2)
    (strong,) = jitter("data.image_size=96", "data.color_jitter=[0.4,0.4,0.4,0.1]")
    assert strong.hue == (-0.1, 0.1) and strong.brightness == (0.6, 1.4)
    assert strong.contrast == strong.saturation == (0.6, 1.4)
    assert jitter("data.image_size=32", "data.color_jitter=[0.4,0.4,0.4,0.1]") == []
    assert jitter("data.image_size=96", "data.color_jitter=false") == []


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optimizer.no_weight_decay=[bn,conv]"],
         r"optimizer.no_weight_decay must be a list of distinct names from bn, bias"),
        (["optimizer.no_weight_decay=[bn,bn]"], "a list of distinct names"),
        (["optimizer.no_weight_decay=bn"], "a list of distinct names"),
        (["optimizer.no_weight_decay=[bias]", "optimizer.weight_decay=0"],
         r"optimizer.no_weight_decay=\[bias\] does not apply with optimizer.weight_decay=0"),
        (["optimizer.lr_per_step=yes"], "optimizer.lr_per_step must be true or false"),
        (["optimizer.nesterov=true", "optimizer.momentum=0"],
         "optimizer.nesterov=true needs optimizer.momentum > 0"),
        (["data.color_jitter=[0.4,0.4,0.4]"], r"data.color_jitter must be true, false or \["),
        (["data.color_jitter=[0.4,0.4,0.4,0.7]"], "hue <= 0.5"),
    ],
)  # fmt: skip
def test_bad_option_values_are_one_line(folders, overrides, message):
    from nas.cli.train import compose_config

    with pytest.raises(TrainError, match=message) as info:
        validate_config(compose_config([*folders, *overrides]))
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------ the recipe


def test_proxyless_imagenet_recipe_is_the_references():
    from nas.cli.train import compose_config

    cfg = compose_config(["experiment=proxyless_imagenet"])
    validate_config(cfg)
    assert (cfg.name, cfg.genotype, cfg.data.name) == ("proxyless_imagenet", "proxyless_mobile",
                                                       "imagenet")  # fmt: skip
    # search/imagenet_run_exp.py's defaults
    assert (cfg.epochs, cfg.batch_size, cfg.label_smoothing) == (300, 256, 0.1)
    o = cfg.optimizer
    assert (o.lr, o.momentum, o.nesterov, o.weight_decay) == (0.05, 0.9, True, 4e-5)
    assert (list(o.no_weight_decay), o.grad_clip, o.schedule, o.lr_min) == (["bn"], 0, "cosine", 0)
    assert o.lr_per_step and o.warmup_epochs == 0
    assert list(cfg.data.color_jitter) == [0.4, 0.4, 0.4, 0.1]
    assert cfg.distill.teacher is None


@pytest.mark.slow
def test_the_recipe_trains_a_darts_network_on_an_image_folder(tmp_path, folders, nas_train):
    """The recipe's loop settings on a network that exists today (the ProxylessNAS networks
    come with their family): NetworkImageNet at 96 pixels, 2 epochs of 2 steps."""
    proc = nas_train(tmp_path / "run", "experiment=proxyless_imagenet", "genotype=DARTS_V2",
                     *folders, "data.image_size=96", "model.auxiliary=false", "batch_size=12",
                     "epochs=2", "eval.max_items=null")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steps = events(tmp_path / "run", "step")
    assert [e["step"] for e in steps] == [1, 2, 3, 4]  # 24 images / 12
    expected = [0.05 * (1 + math.cos(math.pi * s / 4)) / 2 for s in range(4)]
    assert [e["lr"] for e in steps] == pytest.approx(expected, rel=1e-12)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["network"].startswith("NetworkImageNet(C=4, layers=3")
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)
    groups = state["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [4e-5, 0.0]
    assert all(g["nesterov"] for g in groups)


def _has_the_proxyless_networks() -> bool:
    """Whether the ProxylessNAS family and its model section are there (they come with it)."""
    from nas.cli.train import compose_config

    try:
        resolve_train_genotype("proxyless_mobile")
    except ValueError:
        return False
    return compose_config().model.get("proxyless") is not None


@pytest.mark.slow
def test_the_recipe_trains_proxyless_mobile_on_an_image_folder(tmp_path, folders, nas_train):
    """``experiment=proxyless_imagenet genotype=proxyless_mobile`` at 96 pixels, 2 epochs of
    2 steps: the reference's network with the reference's loop settings."""
    from search_spaces.families import family_of

    if not _has_the_proxyless_networks():
        pytest.skip("the ProxylessNAS family (model.proxyless) is not in this tree")
    width = family_of(resolve_train_genotype("proxyless_mobile")).size_keys[0]
    proc = nas_train(tmp_path / "run", "experiment=proxyless_imagenet",
                     "genotype=proxyless_mobile", f"model.proxyless.{width}=8", *folders,
                     "data.image_size=96", "batch_size=12", "epochs=2",
                     "eval.max_items=null")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["network"].startswith("ProxylessNetwork(C=8")
    steps = events(tmp_path / "run", "step")
    expected = [0.05 * (1 + math.cos(math.pi * s / 4)) / 2 for s in range(4)]
    assert [e["lr"] for e in steps] == pytest.approx(expected, rel=1e-12)
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)
    bn = [k for k in state["model"] if k.endswith(("running_mean",))]
    groups = state["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [4e-5, 0.0]
    assert len(groups[1]["params"]) == 2 * len(bn)  # each batch norm's weight and bias
