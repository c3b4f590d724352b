"""The in-memory shims that let the 2019-2021 reference code run on modern PyTorch."""

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from experiments.benchmarks.reference_shims import (
    ReferenceFinder,
    load_function,
    shim_source,
    shim_tree,
)


def shim(code: str) -> str:
    return shim_source(textwrap.dedent(code)).strip()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("x = y.cuda()", "x = y"),
        ("m = Network(C, 10).cuda()", "m = Network(C, 10)"),
        ("t = y.cuda(0)", "t = y"),
        ("t = y.cuda(async=True)", "t = y"),
        ("f(x, async=True)", "f(x, non_blocking=True)"),
        ("p.data.add_(R, v)", "p.data.add_(v, alpha=R)"),
        ("g.data.sub_(eta, ig.data)", "g.data.sub_(ig.data, alpha=eta)"),
        ("z = theta.sub(eta, moment + dtheta)", "z = theta.sub(moment + dtheta, alpha=eta)"),
        ("p.addcmul_(0.5, a, b)", "p.addcmul_(a, b, value=0.5)"),
        ("objs.update(loss.data[0], n)", "objs.update(loss.item(), n)"),
        ("v = Variable(x, volatile=True)", "v = Variable(x)"),
        ("m = Variable(torch.cuda.FloatTensor(3, 1))", "m = Variable(torch.FloatTensor(3, 1))"),
        ("c = correct[:k].view(-1).float()", "c = correct[:k].reshape(-1).float()"),
    ],
)
def test_rewrites(old, new):
    assert shim(old) == new


@pytest.mark.parametrize(
    "code",
    [
        "z = torch.add(a, b)",  # the function, not the deprecated method overload
        "t = a.add(b)",
        "t = a.add_(b, alpha=2)",
        "ok = torch.cuda.is_available()",
        "torch.cuda.manual_seed(2)",
        "y = x.view(n, -1)",
        "y = x.view(-1, 3)",
        "a = t.data[1]",
        "t.data[0] = 1",  # a store, not a read
        "v = Variable(x, requires_grad=True)",
        "s = 'x.cuda(async=True)'",  # strings are not code
    ],
)
def test_leaves_current_code_alone(code):
    assert shim(code) == ast.unparse(ast.parse(code))


def test_changes_are_listed_with_lines():
    _, changes = shim_tree("a = 1\nb = x.cuda()\nc = y.data[0]\n")
    assert changes == ["line 2: .cuda() dropped", "line 3: .data[0] -> .item()"]


def test_shimmed_code_runs_on_cpu():
    import torch

    code = textwrap.dedent(
        """
        import torch
        from torch.autograd import Variable
        p = Variable(torch.ones(3).cuda(), requires_grad=True)
        v = torch.full((3,), 2.0)
        p.data.add_(0.5, v)
        loss = (p * p).sum().cuda(async=True)
        value = loss.data[0]
        """
    )
    namespace: dict = {}
    exec(compile(shim_tree(code)[0], "<test>", "exec"), namespace)
    assert torch.equal(namespace["p"].data, torch.full((3,), 2.0))
    assert namespace["value"] == 12.0


def test_load_function_takes_one_function_of_a_script_that_cannot_be_imported(tmp_path):
    script = tmp_path / "train_search.py"
    script.write_text(
        textwrap.dedent(
            """
            import argparse
            args = argparse.ArgumentParser().parse_args()   # would fail under pytest
            raise SystemExit('not importable')

            def infer(queue):
                total = 0
                for x in queue:
                    total += x.cuda(async=True).sum().data[0] * args.scale
                return total
            """
        )
    )
    import torch

    class Args:
        scale = 2

    infer = load_function(str(script), "infer", {"args": Args})
    assert infer([torch.ones(2), torch.ones(3)]) == 10.0
    with pytest.raises(SystemExit, match="no function train"):
        load_function(str(script), "train", {})


def test_finder_shims_only_modules_under_the_roots(tmp_path):
    ref = tmp_path / "ref"
    (ref / "pkg").mkdir(parents=True)
    (ref / "pkg" / "mod.py").write_text("import torch\nX = torch.zeros(2).cuda()\n")
    (ref / "top.py").write_text("from pkg.mod import X\nY = X.cuda(async=True)\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "plain.py").write_text("Z = 1\n")
    finder = ReferenceFinder([str(ref)])
    assert finder.find_spec("top", [str(ref)]) is not None
    assert finder.find_spec("plain", [str(other)]) is None
    # imported in a fresh interpreter: the finder changes sys.path and sys.meta_path
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(ref)!r}, {str(other)!r}]\n"
        "from experiments.benchmarks.reference_shims import install, ReferenceFinder\n"
        f"install({str(ref)!r}, [''])\n"
        "import top, plain\n"
        "print(top.Y.tolist(), plain.Z, type(top.__loader__).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    ).stdout
    assert out.split() == ["[0.0,", "0.0]", "1", "_ShimLoader"]
    # no shimmed bytecode is left in the user's checkout
    assert not list(ref.rglob("*.pyc"))
