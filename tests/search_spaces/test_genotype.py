import json

import pytest

from search_spaces import (
    DartsGenotype,
    Genotype,
    NB201Genotype,
    format_genotype,
    genotype_from_json,
    get_space,
    parse_genotype,
    published_genotype,
    published_names,
    resolve_genotype,
)
from search_spaces.genotype import family_of_cell_types, genotype_type, is_genotype


def _published_lines(shared_data):
    text = (shared_data / "genotypes" / "published.txt").read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_every_published_line_parses_and_formats_back_exactly(shared_data):
    lines = _published_lines(shared_data)
    assert len(lines) == 6
    for line in lines:
        name, text = line.split(" = ", 1)
        g = parse_genotype(line, space="darts")  # the "NAME = " prefix is accepted
        assert format_genotype(g) == text  # lossless: range(2, 6) and [2, 3, 4, 5] alike
        assert parse_genotype(text) == g
        assert published_genotype(name) == g
        assert json.loads(json.dumps(g.to_json())) == g.to_json()
        back = genotype_from_json(json.dumps(g.to_json()))
        assert back == g and str(back) == text


def test_published_names_and_reference_fields():
    assert published_names() == [
        "DARTS_V1", "DARTS_V2", "PC_DARTS_cifar", "PC_DARTS_image", "DrNAS_cifar10", "DrNAS_imagenet",
        "FairDARTS_a", "FairDARTS_b",
    ]  # fmt: skip
    g = published_genotype("DARTS_V2")
    assert g.normal[0] == ("sep_conv_3x3", 0) and g.normal_concat == (2, 3, 4, 5)
    op_names, indices = zip(*g.reduce)  # reference code does exactly this
    assert indices == (0, 1, 2, 1, 0, 2, 2, 1)
    assert resolve_genotype("DARTS_V2") is g
    with pytest.raises(ValueError, match="unknown published genotype 'DARTS_V3'; expected one of"):
        published_genotype("DARTS_V3")


def test_constructor_accepts_reference_style_values():
    g = Genotype(
        normal=[("sep_conv_3x3", 0), ("sep_conv_3x3", 1)] * 4,
        normal_concat=range(2, 6),
        reduce=[("max_pool_3x3", 0), ("max_pool_3x3", 1)] * 4,
        reduce_concat=range(2, 6),
    )
    assert isinstance(g, DartsGenotype) and g.normal_concat == (2, 3, 4, 5)
    assert hash(g) == hash(parse_genotype(str(g)))


def test_nb201_arch_round_trip():
    arch = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|none~2|"
    g = parse_genotype(arch, space="nb201")
    assert isinstance(g, NB201Genotype)
    assert str(g) == arch
    assert g.ops == (
        "nor_conv_3x3",
        "nor_conv_3x3",
        "avg_pool_3x3",
        "skip_connect",
        "nor_conv_3x3",
        "none",
    )
    assert NB201Genotype.from_ops(g.ops) == g
    assert genotype_from_json(g.to_json()) == g


DARTS_V2 = published_genotype("DARTS_V2")


def _edit(cell="normal", pos=0, pair=None, concat=None):
    data = DARTS_V2.to_json()
    if pair is not None:
        data[cell][pos] = list(pair)
    if concat is not None:
        data[f"{cell}_concat"] = concat
    return data


@pytest.mark.parametrize(
    ("text", "space", "message"),
    [
        # malformed text
        (
            "Genotype(normal=[('sep_conv_3x3', 0)",
            None,
            r"malformed genotype text .*expected Genotype\(normal=",
        ),
        ("Foo(normal=[])", None, r"found Foo\(\.\.\.\); expected Genotype"),
        (
            "Genotype(normal=__import__('os'))",
            None,
            r"normal holds \"__import__\('os'\)\"; expected literals",
        ),
        (
            "Genotype(normal=[], normal_concat=[2], reduce=[])",
            None,
            r"missing field\(s\) reduce_concat",
        ),
        (
            "Genotype(normal=[], normal_concat=[2], reduce=[], reduce_concat=[2], extra=1)",
            None,
            "unknown field 'extra'",
        ),
        (
            "Genotype(normal=[('sep_conv_3x3', 0)], normal_concat=[2], reduce=[], reduce_concat=[2])",
            None,
            "got an odd number",
        ),
        ("{not json", None, "malformed genotype JSON"),
        ("|nor_conv_3x3~0|+|nor_conv_3x3~0|", None, r"NB201 arch has 2 nodes; expected 3"),
        (
            "|nor_conv_3x3|+|a~0|b~1|+|a~0|b~1|c~2|",
            None,
            r"node 1 entry 'nor_conv_3x3'; expected 'op~input'",
        ),
        (
            "|nor_conv_3x3~0|+|nor_conv_3x3~1|nor_conv_3x3~0|+|none~0|none~1|none~2|",
            None,
            r"NB201 node 2: inputs \[1, 0\]; expected one op from each of \[0, 1\]",
        ),
        (
            "|conv_5x5~0|+|none~0|none~1|+|none~0|none~1|none~2|",
            None,
            r"NB201 node 1, input 0: unknown operation 'conv_5x5'; expected one of none, skip_connect",
        ),
        ("", None, "empty genotype text"),
    ],
)
def test_text_errors(text, space, message):
    with pytest.raises(ValueError, match=message):
        parse_genotype(text, space=space)


@pytest.mark.parametrize(
    ("data", "space", "message"),
    [
        (
            _edit(pair=("conv_9x9", 0)),
            None,
            r"normal cell, node 2: unknown operation 'conv_9x9'; expected one of none, max_pool_3x3",
        ),
        (
            _edit(pos=7, pair=("sep_conv_3x3", 5)),
            None,
            r"normal cell, node 5: input index 5 out of range; node 5 takes inputs 0\.\.4",
        ),
        (
            _edit(pos=2, pair=("sep_conv_3x3", 3)),
            None,
            r"normal cell, node 3: input index 3 out of range; node 3 takes inputs 0\.\.2",
        ),
        (
            _edit(concat=[2, 3, 7]),
            None,
            r"normal_concat \[2, 3, 7\]: expected distinct intermediate nodes in 2\.\.5",
        ),
        (
            _edit(pair=("sep_conv_5x5", 0)),
            "s2",
            r"operation 'sep_conv_5x5' is not allowed on edge 0->2 of space 's2'; allowed: skip_connect, sep_conv_3x3",
        ),
        (
            _edit(pair=("max_pool_3x3", 0)),
            "s1",
            r"normal cell, node 2: operation 'max_pool_3x3' is not allowed on edge 0->2 of space 's1'; allowed: skip_connect, dil_conv_3x3",
        ),
        (_edit(pair=("none", 0)), "s5", r"'none' is not allowed on edge 0->2 of space 's5'"),
        (
            _edit(pair=("noise", 0)),
            "darts",
            r"'noise' is not allowed on edge 0->2 of space 'darts'",
        ),
        (DARTS_V2.to_json(), "nb201", r"cannot be used with space 'nb201'"),
    ],
)
def test_structural_errors(data, space, message):
    with pytest.raises(ValueError, match=message):
        parse_genotype(json.dumps(data), space=space)


def test_wrong_number_of_inputs_for_the_space():
    data = DARTS_V2.to_json()
    data["normal"] = data["normal"][:6]  # three nodes only
    data["normal_concat"] = [2, 3, 4]
    g = parse_genotype(json.dumps(data))  # structurally fine on its own
    with pytest.raises(
        ValueError, match=r"6 \(op, input\) pairs give 3 nodes; space 'darts' expects 8 pairs"
    ):
        g.validate(get_space("darts"))


def test_two_ops_from_the_same_input_are_a_valid_cell_that_trains():
    """GDAS's DARTS-space derivation may give a node two ops from one input."""
    import torch

    from search_spaces.families import family_of

    data = _edit(pos=1, pair=("sep_conv_3x3", 0))
    assert data["normal"][0][1] == data["normal"][1][1] == 0
    g = parse_genotype(json.dumps(data), space="darts")
    net, _ = family_of(g).network(g, C=8, layers=3, num_classes=10)
    logits, _ = net(torch.randn(2, 3, 32, 32))
    logits.sum().backward()
    assert logits.shape == (2, 10)


def test_nb201_arch_in_darts_space():
    with pytest.raises(ValueError, match="cannot be used with space 'darts'"):
        parse_genotype("|none~0|+|none~0|none~1|+|none~0|none~1|none~2|", space="darts")


def test_s4_genotype_with_noise_validates():
    data = _edit(pair=("noise", 0))
    g = parse_genotype(json.dumps(data))
    data2 = json.loads(json.dumps(g.to_json()))
    assert data2["normal"][0] == ["noise", 0]


def test_each_family_has_its_genotype_class_that_knows_how_it_is_drawn():
    darts, nb201 = genotype_type("darts"), genotype_type("nb201")
    assert darts is DartsGenotype and nb201 is NB201Genotype
    assert [darts.node_label(i) for i in range(4)] == ["$c_{k-2}$", "$c_{k-1}$", "0", "1"]
    assert [nb201.node_label(i) for i in range(4)] == ["0", "1", "2", "3"]
    nodes = [("a", "input"), ("b", "input"), ("n0", "node"), ("n1", "node"), ("out", "output")]
    pos = darts.layout(nodes)
    assert set(pos) == {n for n, _ in nodes} and pos["out"][0] > pos["n1"][0] > pos["n0"][0]
    assert darts.cell_title("reduce") == "reduce cell" and nb201.cell_title("cell") == "NB201 cell"
    with pytest.raises(ValueError, match="unknown space family 'mobilenet'; expected one of"):
        genotype_type("mobilenet")


def test_the_family_of_cell_types_and_what_is_a_genotype():
    assert family_of_cell_types(["cell"]) == "nb201"
    assert family_of_cell_types(("normal", "reduce")) == family_of_cell_types(["normal"]) == "darts"
    assert family_of_cell_types([]) == "darts"  # nothing to tell by: the first family
    assert genotype_type("nb201").space_name == "nb201" and DartsGenotype.space_name == "darts"
    cell = NB201Genotype.from_ops(["none"] * 6)
    assert is_genotype(cell) and is_genotype(published_genotype("DARTS_V2"))
    assert not is_genotype(str(cell)) and not is_genotype(None)
