"""Every benchmark script under ``bench/`` still imports against the package, and what they
share (``reporting``, ``inputs``) does what they rely on. The learning protocols' records and tests
are in ``test_bench_learning.py``.

Benchmarks run outside ``make test``, so a renamed or moved helper breaks them
silently (``bench_retrieval.py`` once imported ``atomic_file`` from where it
no longer lived). Importing each module runs its top-level imports and
definitions, not its measurements.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bench_paths import BENCH, on_path

SCRIPTS = sorted(BENCH.glob("*/bench_*.py"))


def test_the_benchmarks_are_found_by_question():
    """The glob sees the benchmark folders (an empty list would pass every case below), and
    no script lies loose in ``bench/`` beside them."""
    assert len(SCRIPTS) >= 20
    assert len({script.parent.name for script in SCRIPTS}) >= 5
    assert not list(BENCH.glob("bench_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_benchmark_script_imports(script: Path, monkeypatch):
    """Loading the script as a module raises nothing (its ``main`` is not called)."""
    on_path(monkeypatch, script.parent.name)
    spec = importlib.util.spec_from_file_location(f"bench_check_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"


def test_a_report_names_the_cpu_by_its_first_processor(tmp_path, monkeypatch):
    """The model name and the kernel-picking extensions come from the first processor's entry,
    in a fixed order, other flags left out; without /proc/cpuinfo the CPU is unknown."""
    on_path(monkeypatch, "steps")
    from reporting import cpu_description

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Chip A\nflags\t\t: fpu amx_bf16 avx2 sse4_2\n\n"
                       "processor\t: 1\nmodel name\t: Chip B\nflags\t\t: fpu avx512f\n")
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert cpu_description(cpuinfo) == "Chip A (2 cores; avx2, amx_bf16)"
    assert cpu_description(tmp_path / "absent") == "unknown CPU (2 cores; no AVX2)"


def test_compile_payback_from_hand_timings(monkeypatch):
    """Cost = first compiled update − first eager one; saving = difference of the later
    updates' medians over the batch; break-even = cost / saving."""
    on_path(monkeypatch, "updates")
    from bench_compile_payback import payback

    result = payback([20.0, 16.0, 18.0, 17.0], [52.0, 12.0, 13.0, 12.0], batch_size=8)
    assert result["compile_cost_s"] == 32.0
    assert result["saving_per_sequence_s"] == 5 / 8
    assert result["break_even_sequences"] == 32.0 / (5 / 8)
    assert result["speedup_after_compile"] == 17 / 12
    assert payback([10.0, 10.0], [40.0, 11.0], batch_size=8)["break_even_sequences"] is None


def test_allocator_children_differ_only_in_what_is_preloaded(monkeypatch):
    """One child preloads tcmalloc alone, the other nothing; $ADVRAG_ALLOCATOR cannot re-choose,
    and the rest of the environment is the parent's."""
    on_path(monkeypatch, "runtime")
    from bench_allocator import allocator_envs

    monkeypatch.setenv("LD_PRELOAD", "libother.so")
    monkeypatch.setenv("ADVRAG_ALLOCATOR", "system")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    envs = allocator_envs("/lib/libtcmalloc_minimal.so.4")
    assert envs["tcmalloc"]["LD_PRELOAD"] == "/lib/libtcmalloc_minimal.so.4"
    assert "LD_PRELOAD" not in envs["system"]
    assert all("ADVRAG_ALLOCATOR" not in env and env["OMP_WAIT_POLICY"] == "PASSIVE"
               for env in envs.values())
    assert set(envs["tcmalloc"]) - set(envs["system"]) == {"LD_PRELOAD"}


def test_the_demo_report_names_the_allocator_its_advrag_process_runs_on(monkeypatch):
    """tcmalloc when installed (auto) or already preloaded; the system's when asked or absent."""
    on_path(monkeypatch, "jobs")
    import bench_demo

    import advrag.common.allocator as allocator

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("ADVRAG_ALLOCATOR", raising=False)
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: "/lib/libtcmalloc_minimal.so.4")
    assert bench_demo.demo_allocator() == "tcmalloc"
    monkeypatch.setenv("ADVRAG_ALLOCATOR", "system")
    assert bench_demo.demo_allocator() == "system"
    monkeypatch.setenv("LD_PRELOAD", "/lib/libtcmalloc_minimal.so.4")
    monkeypatch.setenv("ADVRAG_ALLOCATOR", "auto")
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    assert bench_demo.demo_allocator() == "tcmalloc"
    monkeypatch.delenv("LD_PRELOAD")
    assert bench_demo.demo_allocator() == "system"


def test_the_update_benchmark_switches_lora_layers_between_peft_and_fused(monkeypatch):
    """Ways before ``+ fused LoRA`` run peft's own forward, that way and later the fused one."""
    on_path(monkeypatch, "updates")
    from bench_update import WAYS, lora_forwards, use_fused_lora
    from transformers import LlamaConfig, LlamaForCausalLM

    from advrag.engines.local.policy import LoraSettings, TrainablePolicy, fused_lora_forward

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    policy = TrainablePolicy(LlamaForCausalLM(config), lora=LoraSettings(r=2, alpha=4))
    forwards = lora_forwards(policy.model)
    assert len(forwards) == 7  # q, k, v, o, gate, up, down
    use_fused_lora(forwards, False)
    assert all("forward" not in layer.__dict__ for layer in forwards)
    use_fused_lora(forwards, True)
    assert all(layer.forward.__func__ is fused_lora_forward for layer in forwards)
    assert [name for name, way in WAYS.items() if way[3]] == ["+ fused LoRA", "+ AMX attention",
                                                              "+ packed rows", "+ compiled layers"]
    assert [name for name, way in WAYS.items() if way[4]] == ["+ AMX attention", "+ packed rows",
                                                              "+ compiled layers"]
    assert [name for name, way in WAYS.items() if way[5]] == ["+ packed rows",
                                                              "+ compiled layers"]


def test_rollout_compile_payback_from_hand_timings(monkeypatch):
    """Cost = (start + first round) compiled − eager's; saving = difference of the later
    rounds' medians over the rollouts a round; break-even = cost / saving."""
    on_path(monkeypatch, "rollouts")
    from bench_rollout_compile_payback import payback

    eager = {"start_s": 6.0, "first_round_s": 5.0, "rounds_s": [5.0, 4.0, 6.0]}
    compiled = {"start_s": 60.0, "first_round_s": 4.0, "rounds_s": [4.5, 4.0, 4.25]}
    result = payback(eager, compiled, batch=16)
    assert result["compile_cost_s"] == 53.0
    assert result["saved_s_per_rollout"] == 0.75 / 16
    assert result["break_even_rollouts"] == 53.0 / (0.75 / 16)
    slower = compiled | {"rounds_s": [5.5, 5.0, 6.0]}
    assert payback(eager, slower, batch=16)["break_even_rollouts"] is None


def test_a_fresh_clone_gets_the_demo_world_and_its_indexes_once(tmp_path, monkeypatch):
    """With no world, ``offline_world`` writes `make demo`'s (configs/pipeline-demo.yaml: seed 13,
    500/100/100 questions, 60-word passages) and runs the four data stages; once both are there,
    it builds nothing."""
    on_path(monkeypatch, "steps")
    from inputs import offline_world

    from advrag.ops import dataplane

    calls = []
    monkeypatch.setattr(dataplane, "build_world", lambda out, config: calls.append((out, config)))
    monkeypatch.setattr(dataplane, "reproduce", lambda root, targets: calls.append((root, targets)))
    assert offline_world(tmp_path) == tmp_path / "data/world"
    (world_dir, world), (root, stages) = calls
    assert world_dir == tmp_path / "data/world" and root == tmp_path
    assert (world.seed, world.n_train, world.n_dev, world.n_test, world.passage_words) == (
        13, 500, 100, 100, 60)
    assert stages == ["chunk", "embed", "index", "bm25"]
    (tmp_path / "data/world").mkdir(parents=True)
    (tmp_path / "data/world/train.jsonl").write_text("")
    (tmp_path / "processed/index").mkdir(parents=True)
    calls.clear()
    offline_world(tmp_path)
    assert calls == []


def test_a_childs_result_is_its_last_json_line(monkeypatch):
    """Library logs around it are passed over; an object or a list is read, the last one wins."""
    monkeypatch.syspath_prepend(str(BENCH))
    from reporting import child_json

    script = ("print('INFO loading'); print('{\"mode\": \"a\"}'); print('[1, 2]'); "
              "print('done')")
    assert child_json([sys.executable, "-c", script]) == [1, 2]
    assert child_json([sys.executable, "-c", "print('x'); print('{\"n\": 3}')"]) == {"n": 3}


def test_a_killed_child_raises_while_a_server_it_started_still_holds_its_output(
        monkeypatch, tmp_path):
    """The child starts a grandchild that keeps the child's stdout open for 30 s (as Prefect's
    server does), then is killed: child_json raises before the grandchild has ended."""
    monkeypatch.syspath_prepend(str(BENCH))
    from reporting import child_json

    ended = tmp_path / "grandchild-ended"
    grandchild = f"import time; time.sleep(30); open({str(ended)!r}, 'w').close()"
    script = ("import os, signal, subprocess, sys; "
              f"subprocess.Popen([sys.executable, '-c', {grandchild!r}]); "
              "os.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(subprocess.CalledProcessError) as killed:
        child_json([sys.executable, "-c", script])
    assert not ended.exists()  # it did not wait for the grandchild to let go of the output
    assert killed.value.returncode == -signal.SIGKILL
