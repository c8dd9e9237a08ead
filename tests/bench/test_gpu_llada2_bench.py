"""bench/gpu_llada2.py's --tiny CPU smoke mode (its step: bench/llada2_step.py): the prepared GPU
measurement runs end to end, every MoE implementation gives the loop's logits, and the
bandwidth accounting adds up."""

from __future__ import annotations

import json

import pytest

from bench import gpu_llada2, llada2_step


def test_tiny_run_compares_every_impl_and_accounts_the_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    record = gpu_llada2.main(["--tiny", "--device", "cpu", "--contexts", "64", "--batches", "1,3",
                              "--iters", "1", "--bandwidth-tbs", "0.001"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(json.dumps(record))  # the final JSON line is the record
    rows = record["rows"]
    assert [(r["impl"], r["routing"], r["batch"]) for r in rows] == [
        (i, rt, b) for b in (1, 3) for rt in ("token", "block") for i in ("loop", "eager", "reference")]
    cfg = llada2_step.TINY
    per_expert = 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"] * 4  # fp32
    for r in rows:
        assert r["max_abs_diff_vs_first"] < 1e-4  # the new paths compute what the loop does
        assert 0 < r["experts_per_layer"] <= cfg["num_experts"]
        layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
        assert r["gb_experts"] == pytest.approx(r["experts_per_layer"] * layers * per_expert / 1e9, abs=2e-3)
        kv = cfg["num_hidden_layers"] * r["batch"] * (64 + 32) * cfg["num_key_value_heads"] * cfg["head_dim"] * 2 * 4
        assert r["gb_kv"] == pytest.approx(kv / 1e9, abs=1e-3)
        assert r["bound_ms"] == pytest.approx(r["bytes_read"] / 1e6, rel=1e-2)  # 1 GB/s: 1 ms a MB
        assert r["x_bound"] == pytest.approx(r["ms"] / r["bound_ms"], rel=2e-2)
    assert [v["cached"] for v in record["goal"]["batch1"]] == [64]
    # block routing: at most the capacity per block, fewer experts per block than token routing
    block = [r for r in rows if r["routing"] == "block"]
    token = [r for r in rows if r["routing"] == "token"]
    assert all(r["experts_per_block"] <= llada2_step.CAPACITY["tiny"] for r in block)
    assert max(r["experts_per_block"] for r in block) < min(r["experts_per_block"] for r in token)
    assert all(r["gb_experts_per_block"] == pytest.approx(
        r["experts_per_block"] * layers * per_expert / 1e9, abs=1e-4) for r in rows)


def test_device_names_map_to_their_bandwidth() -> None:
    assert gpu_llada2.peak_tbs("NVIDIA H100 80GB HBM3") == 3.35
    assert gpu_llada2.peak_tbs("NVIDIA H200") == 4.8
    assert gpu_llada2.peak_tbs("NVIDIA H100 PCIe") == 2.0
    assert gpu_llada2.peak_tbs("cpu") is None


def test_skips_with_a_json_line_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert gpu_llada2.main([])["skipped"] is True
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] is True


def test_graph_replay_is_refused_off_cuda() -> None:
    with pytest.raises(SystemExit, match="CUDA"):
        gpu_llada2.main(["--tiny", "--device", "cpu", "--impls", "loop,triton+graph"])


def test_routing_estimate_needs_no_device(capsys: pytest.CaptureFixture[str]) -> None:
    est = gpu_llada2.main(["--routing-estimate", "--tiny"])["routing_estimate"]
    assert est["block"]["max"] <= llada2_step.CAPACITY["tiny"] < est["token"]["experts_per_block"]
    assert est["ratio"] > 1
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["routing_estimate"] == est
