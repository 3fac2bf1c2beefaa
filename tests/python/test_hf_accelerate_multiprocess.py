"""An unchanged Transformers Trainer across 2 processes on tpu: Accelerate runs it with DDP over
torchtpu's c10d backend (see torchtpu/_accelerate.py), not as two processes training alone.

Two ranks start as fresh interpreters the way torchrun starts them (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR/PORT in the environment), each with one tpu device, as a host that gives
each process its own chip. Each rank trains a tiny Llama with `per_device_train_batch_size=8` on
a 16-sample dataset, so every optimizer step averages the gradients of the whole dataset over
the two ranks, whatever order the sampler draws. The reference is one CPU process training the
same model with a batch of 16. Without the integration each rank would train on its own half,
Accelerate would report one process, and the parameters would differ from the reference.

Tolerances as in test_hf_trainer: float32, XLA accumulates in a different order than CPU ATen,
and DDP averages two half-batch gradients where the CPU takes one mean.
"""

from __future__ import annotations

import copy
import os
import socket
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 3


def _model_and_data():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, intermediate_size=64,
                      max_position_embeddings=32)
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    data = []
    for _ in range(16):
        ids = torch.randint(0, 128, (8,), generator=g)
        data.append({"input_ids": ids, "labels": ids})
    return model, data


def _train(model, data, out_dir, batch_size, use_cpu):
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(out_dir), max_steps=STEPS,
                             per_device_train_batch_size=batch_size, learning_rate=1e-2,
                             logging_steps=1, report_to="none", save_strategy="no", seed=0,
                             use_cpu=use_cpu, disable_tqdm=True, max_grad_norm=1.0)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    return trainer


def _rank_main(out_dir: str) -> None:
    """Runs in each spawned rank."""
    import torchtpu  # noqa: F401  (importing torch autoloads it too)

    model, data = _model_and_data()
    trainer = _train(model, data, out_dir, batch_size=8, use_cpu=False)
    acc = trainer.accelerator
    rank = acc.process_index
    facts = dict(num_processes=acc.num_processes, device=str(acc.device),
                 backend=acc.state.backend, distributed_type=str(acc.distributed_type),
                 wrapped=type(trainer.model_wrapped).__name__,
                 losses=[h["loss"] for h in trainer.state.log_history if "loss" in h],
                 params={k: v.detach().cpu() for k, v in trainer.model.named_parameters()})
    torch.save(facts, os.path.join(out_dir, f"rank{rank}.pt"))
    print(f"rank {rank} ok", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_importing_accelerate_before_torch_applies_the_integration(run_python):
    # `import accelerate` runs accelerate/accelerator.py, whose `import torch` autoloads
    # torchtpu while that module is still executing: the integration must wait for it to finish
    # (this import order used to fail inside torch's autoload, and so did `accelerate launch`).
    res = run_python("""
        from accelerate import Accelerator, PartialState
        import safetensors.torch
        import torch
        print(torch.tpu.is_available(), Accelerator._torchtpu_patched,
              PartialState._torchtpu_patched, safetensors.torch.safe_open._torchtpu_wrapped)
    """)
    assert res.stdout.split() == ["True"] * 4, res.stdout + res.stderr


def _check_against_one_cpu_process(out_dir, device_of_rank):
    model, data = _model_and_data()
    reference = _train(copy.deepcopy(model), data, out_dir / "cpu", batch_size=16, use_cpu=True)
    ref_losses = torch.tensor([h["loss"] for h in reference.state.log_history if "loss" in h])
    ref_params = dict(reference.model.named_parameters())

    ranks = [torch.load(out_dir / f"rank{r}.pt") for r in range(2)]
    for rank, facts in enumerate(ranks):
        assert facts["num_processes"] == 2
        assert facts["device"] == device_of_rank(rank)
        assert facts["backend"] == "tpu"
        assert facts["wrapped"] == "DistributedDataParallel"
        assert len(facts["losses"]) == STEPS
        # The logged loss is the mean over both ranks: the whole dataset's loss.
        torch.testing.assert_close(torch.tensor(facts["losses"]), ref_losses, rtol=1e-4, atol=1e-5)
        for name, p in facts["params"].items():
            torch.testing.assert_close(p, ref_params[name].detach(), rtol=1e-3, atol=1e-4,
                                       msg=lambda m, name=name: f"parameter {name}: {m}")
    # DDP keeps the replicas identical.
    for name, p in ranks[0]["params"].items():
        torch.testing.assert_close(ranks[1]["params"][name], p, rtol=0, atol=0)


def test_trainer_on_two_processes_is_data_parallel_and_matches_one_cpu_process(start_python,
                                                                               tmp_path):
    port = str(_free_port())
    code = (f"import sys; sys.path.insert(0, {HERE!r}); "
            f"import test_hf_accelerate_multiprocess as t; t._rank_main({str(tmp_path)!r})")
    procs = [start_python(code, timeout=300, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                          LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                          TORCHTPU_CPU_DEVICE_COUNT="1", GLOO_SOCKET_IFNAME="lo")
             for r in range(2)]
    for r, p in enumerate(procs):
        res = p.wait()
        assert f"rank {r} ok" in res.stdout, res.stdout + res.stderr
    _check_against_one_cpu_process(tmp_path, lambda rank: "tpu:0")


@pytest.mark.parametrize("multi_gpu", [["--multi_gpu"], []], ids=["multi_gpu", "plain"])
def test_accelerate_launch_two_processes(start_python, tmp_path, multi_gpu):
    # `accelerate launch [--multi_gpu] --num_processes 2 train.py`, run as the `accelerate`
    # command runs it (its launcher starts torchrun's elastic agent, which starts the ranks). The
    # host has four tpu devices here, so rank r trains on tpu:r. Without --multi_gpu the launcher
    # counts the devices itself (it used to find none for tpu and start one process, silently).
    # HF_HOME points at an empty folder so that no Accelerate config file of this machine's
    # user changes the launch.
    script = tmp_path / "train.py"
    script.write_text(f"import sys; sys.path.insert(0, {HERE!r})\n"
                      "import test_hf_accelerate_multiprocess as t\n"
                      "t._rank_main(sys.argv[1])\n")
    argv = ["accelerate", "launch", *multi_gpu, "--num_processes", "2", "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(_free_port()), str(script), str(tmp_path)]
    code = ("import sys; from accelerate.commands.accelerate_cli import main; "
            f"sys.argv = {argv!r}; main()")
    res = start_python(code, timeout=240, TORCHTPU_CPU_DEVICE_COUNT="4",
                       HF_HOME=str(tmp_path / "hf_home"), GLOO_SOCKET_IFNAME="lo").wait()
    for r in range(2):
        assert f"rank {r} ok" in res.stdout, res.stdout + res.stderr
    _check_against_one_cpu_process(tmp_path, lambda rank: f"tpu:{rank}")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
