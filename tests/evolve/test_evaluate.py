"""evaluate_source: the ladder on planted variants, held-out shapes, the trust boundary, caching.

Each sandboxed evaluation costs two jax start-ups (~3-6 s); the default tests run a handful
on one small seen shape, the whole manifest of both tasks runs under ``-m slow``.
"""

import time
import tomllib
from importlib import resources

import pytest

from jaxpapers.core import sandbox
from jaxpapers.evolve import evaluate as E
from jaxpapers.evolve import exploits, tasks
from jaxpapers.evolve.mutators import load_variants

pytestmark = pytest.mark.skipif(not sandbox.available(site_packages=True),
                                reason=sandbox.why_unavailable(site_packages=True) or "no")

QM = tasks.TASKS["quantized_matmul"]
ONE = dict(shapes=QM.seen_shapes[:1], holdout_shapes=QM.holdout_shapes, seeds=(0,))


def _manifest(task):
    text = resources.files("jaxpapers.evolve.variants").joinpath(task, "MANIFEST.toml")
    return tomllib.loads(text.read_text())


@pytest.fixture(scope="module")
def qm():
    return load_variants("quantized_matmul")


def test_correct_kernel_is_level_5_with_a_model_speedup(qm):
    ev = E.evaluate_source(qm["blockspec_unpack"], "quantized_matmul", **ONE)
    assert ev.level == 5 and ev.correct_seen and ev.failed_shape is None, ev.message
    assert ev.cell == (1, 3, 1)
    assert ev.speedup > 0 and ev.fitness == pytest.approx(5 + ev.speedup)
    assert set(ev.seconds) == {s.name for s in QM.gpu_shapes}
    assert ev.timing.startswith("roofline-proxy")
    t0 = time.perf_counter()
    again = E.evaluate_source(qm["blockspec_unpack"], "quantized_matmul", **ONE)
    assert again is ev and time.perf_counter() - t0 < 0.5      # cached


def test_hardcoded_kernel_passes_seen_and_fails_the_named_heldout_shape(qm):
    ev = E.evaluate_source(qm["hardcoded_k256"], "quantized_matmul", **ONE)
    assert ev.level == 4 and ev.correct_seen
    assert ev.failed_shape == QM.holdout_shapes[0].name
    assert ev.fitness == 4.0
    # without the held-out shape it would have looked correct
    blind = E.evaluate_source(qm["hardcoded_k256"], "quantized_matmul", shapes=ONE["shapes"],
                              holdout_shapes=(), seeds=(0,))
    assert blind.level == 5


def test_lowering_failure_is_level_1_and_syntax_error_level_0(qm):
    ev = E.evaluate_source(qm["no_compile_concat"], "quantized_matmul", **ONE)
    assert ev.level == 1 and "cuda export" in ev.message, ev.message
    ev0 = E.evaluate_source(qm["broken_syntax"], "quantized_matmul", **ONE)
    assert ev0.level == 0 and ev0.fitness == 0.0 and "syntax" in ev0.message


def test_patching_time_and_the_evaluator_inside_the_child_changes_nothing(qm):
    wrong = qm["wrong_no_offset"]
    base = E.evaluate_source(wrong, "quantized_matmul", **ONE)
    patched = E.evaluate_source(exploits.attempt_source("patch_score", wrong),
                                "quantized_matmul", **ONE)
    assert base.level == patched.level == 4
    assert patched.fitness == base.fitness


def test_bad_arguments_raise_naming_them(qm):
    src = qm["xla_dequant"]
    with pytest.raises(TypeError, match="source"):
        E.evaluate_source(b"x", "quantized_matmul")
    with pytest.raises(ValueError, match="task"):
        E.evaluate_source(src, "conv")
    with pytest.raises(ValueError, match="seeds"):
        E.evaluate_source(src, "quantized_matmul", seeds=())
    with pytest.raises(ValueError, match="timeout_s"):
        E.evaluate_source(src, "quantized_matmul", timeout_s=0)
    with pytest.raises(ValueError, match="memory_gb"):
        E.evaluate_source(src, "quantized_matmul", memory_gb=0.1)
    with pytest.raises(TypeError, match="params"):
        E.evaluate_source(src, "quantized_matmul", params={"block": object()})
    with pytest.raises(TypeError, match="shapes"):
        E.evaluate_source(src, "quantized_matmul",
                          shapes=tasks.TASKS["sparse_decode_attention"].seen_shapes)
    with pytest.raises(ValueError, match="distinct"):
        E.evaluate_source(src, "quantized_matmul", shapes=QM.seen_shapes[:1],
                          holdout_shapes=QM.seen_shapes[:1])


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(tasks.TASKS))
def test_every_variant_gets_its_manifest_level_and_cell(task):
    variants, man = load_variants(task), _manifest(task)
    assert set(variants) == set(man)
    for name, src in variants.items():
        ev = E.evaluate_source(src, task)
        assert ev.level == man[name]["level"], (name, ev.message)
        assert list(ev.cell) == man[name]["cell"], name
        if "failed_shape" in man[name]:
            assert ev.failed_shape == man[name]["failed_shape"], name


@pytest.mark.slow
def test_planted_escape_attempts_are_all_blocked(qm):
    def evaluate(source, timeout_s):
        return E.evaluate_source(source, "quantized_matmul", timeout_s=timeout_s, **ONE)
    outcomes = exploits.run_attempts(evaluate, good_kernel=qm["xla_dequant"],
                                     wrong_kernel=qm["wrong_no_offset"], timeout_s=15)
    assert [o.name for o in outcomes] == list(exploits.ATTEMPTS)
    assert all(o.blocked for o in outcomes), [o for o in outcomes if not o.blocked]
