"""Instance norm removes per-image style; group norm ignores the batch; the others do not."""

import pytest
import torch

from layernorm_tutorial.lab.norm_family import norm_invariances as ni

F64 = torch.float64


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def test_normalize_matches_torch():
    x = torch.randn(4, 6, 5, 5, dtype=F64, generator=_generator(0)) * 2 + 1
    tf = torch.nn.functional
    expected = {"batch": tf.batch_norm(x, None, None, training=True),
                "layer": tf.layer_norm(x, x.shape[1:]),
                "instance": tf.instance_norm(x),
                "group": tf.group_norm(x, 3)}
    for member, ref in expected.items():
        torch.testing.assert_close(ni.normalize(x, member, num_groups=3), ref)
    with pytest.raises(ValueError, match="member"):
        ni.normalize(x, "rms")
    with pytest.raises(ValueError, match="4-D"):
        ni.normalize(x[0], "layer")


def test_instance_norm_removes_per_image_style_and_others_do_not():
    g = _generator(1)
    content = torch.randn(4, 3, 8, 8, dtype=F64, generator=g)
    contrast = 0.3 + 2.7 * torch.rand(4, 3, dtype=F64, generator=g)
    offset = 4 * torch.rand(4, 3, dtype=F64, generator=g) - 2
    styled = ni.apply_style(content, contrast, offset)
    torch.testing.assert_close(styled[2, 1], contrast[2, 1] * content[2, 1] + offset[2, 1])
    gaps = ni.style_gaps(content, styled, num_groups=1)
    assert gaps["instance"] < 1e-4                    # only eps / var is left
    for member in ("batch", "layer", "group"):
        assert gaps[member] > 0.1, member
    # one style shared by the whole batch is removed by batch norm too: it is per channel
    shared = ni.apply_style(content, contrast[:1].expand(4, 3), offset[:1].expand(4, 3))
    assert ni.style_gaps(content, shared, num_groups=1)["batch"] < 1e-4


def test_apply_style_rejects_bad_arguments():
    images = torch.zeros(2, 3, 4, 4)
    with pytest.raises(ValueError, match="contrast must have shape"):
        ni.apply_style(images, torch.ones(3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="> 0"):
        ni.apply_style(images, -torch.ones(2, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="styled"):
        ni.style_gaps(images, images[:1])


def test_group_norm_ignores_batch_size_and_batch_norm_does_not():
    g = _generator(2)
    sample = torch.randn(1, 4, 6, 6, dtype=F64, generator=g)
    companions = 3 * torch.randn(31, 4, 6, 6, dtype=F64, generator=g) + 1
    gaps = ni.batch_size_gaps(sample, companions, [1, 2, 8, 32], num_groups=2)
    for member in ("group", "layer", "instance"):
        assert max(gaps[member]) < 1e-12, member
    assert gaps["batch"][0] == 0 and min(gaps["batch"][1:]) > 0.1
    # at batch size 1, training-mode batch norm is instance norm
    torch.testing.assert_close(ni.normalize(sample, "batch"), ni.normalize(sample, "instance"))
    with pytest.raises(ValueError, match="batch size"):
        ni.batch_size_gaps(sample, companions, [33])
    with pytest.raises(ValueError, match=r"\(1, C, H, W\)"):
        ni.batch_size_gaps(companions[:2], companions, [1])


def test_family_table_text_fits_the_page_and_matches_axes():
    from layernorm_tutorial import axes
    from layernorm_tutorial.lab.norm_family.tables import family_table_text

    for shape, layout, groups in (((20, 5, 10, 10), "NCHW", 5), ((32, 20, 512), "BTC", 8)):
        text = family_table_text(shape, layout, groups)
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 80
        rows = axes.family_table(shape, layout, num_groups=groups)
        assert len(lines) == 2 + len(rows)
        for line, row in zip(lines[2:], rows, strict=True):
            assert line.split()[0] == row["member"].split()[0]
            assert str(row["elements per statistic"]) in line
            assert line.endswith(str(row["running statistics"]))
