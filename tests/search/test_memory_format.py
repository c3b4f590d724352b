"""``channels_last=auto``: NHWC, with partial channels too and through a DrNAS stage change;
``compile``: the compiled supernet forward is installed, or a one-line error."""

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchError, SearchRun

TINY = ["space.C=4", "space.layers=1", "batch_size=16", "data.max_items=32", "eval=false",
        "figures=false"]  # fmt: skip
PROGRESSIVE = [
    *TINY,
    "search=drnas",
    "epochs=2",
    "search.stages=[{epochs:1,partial_channels:4,keep:5},{epochs:1,partial_channels:1,keep:3}]",
]


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=list(overrides))


def _convs(run):
    return [p for p in run.supernet.parameters() if p.dim() == 4]


def _nhwc(t):
    return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def test_auto_is_nhwc_at_k_4_and_stays_so_when_drnas_widens_to_full_width(tmp_path):
    run = SearchRun(_cfg(*PROGRESSIVE), tmp_path / "r")
    # 1x1 kernels and one-channel weights (C/K = 1 here) look the same in both layouts
    convs = [p for p in _convs(run) if p.shape[2] > 1 and p.shape[:2].numel() > 1]
    assert run.channels_last and convs and all(_nhwc(p) for p in convs)
    run.run()
    assert run.supernet.partial_channels == 1 and run.channels_last
    # the widened ops' weights come back from index_select in NCHW: converted again
    convs = [p for p in _convs(run) if p.shape[2] > 1]
    assert convs and all(_nhwc(p) for p in convs)
    buffers = [run.weight_optimizer.state[p]["momentum_buffer"] for p in convs]
    assert all(_nhwc(b) for b in buffers)


def test_auto_is_nhwc_for_a_full_width_supernet_and_can_be_forced(tmp_path):
    assert SearchRun(_cfg(*TINY), tmp_path / "a").channels_last
    assert not SearchRun(_cfg(*TINY, "channels_last=false"), tmp_path / "b").channels_last
    forced = SearchRun(_cfg(*PROGRESSIVE, "channels_last=false"), tmp_path / "c")
    assert not forced.channels_last and forced.supernet.partial_channels == 4
    with pytest.raises(SearchError, match="channels_last must be true, false or auto, got 'yes'"):
        SearchRun(_cfg(*TINY, "channels_last=yes"), tmp_path / "d")


def test_compile_installs_the_compiled_forward_and_rejects_non_booleans(tmp_path):
    # building only: nothing is traced until the first forward
    run = SearchRun(_cfg(*TINY, "compile=true"), tmp_path / "a")
    assert "forward" in run.supernet.__dict__  # compile_supernet's forward on the instance
    assert "forward" not in SearchRun(_cfg(*TINY), tmp_path / "b").supernet.__dict__
    with pytest.raises(SearchError, match="compile must be true, false or graphs, got 'yes'"):
        SearchRun(_cfg(*TINY, "compile=yes"), tmp_path / "c")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_cuda_graphs_are_refused_off_a_cuda_device_before_anything_is_built(tmp_path):
    with pytest.raises(SearchError, match=r"^compile=graphs records CUDA graphs and needs a CUDA"):
        SearchRun(_cfg(*TINY, "compile=graphs"), tmp_path / "a")
