"""The Python package with Debian's torch against the real tensortierd ($TENSORTIER_SOCKET).
Exit 0 when every check passes; run by client_daemon_test (tests/privileged/client)."""

import sys

import torch

import tensortier as tt


def main():
    c = tt.init(name="python-client-check")
    assert c.connected, "not connected to tensortierd"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16))
    opt = torch.optim.Adam(model.parameters())
    tt.register_module(model)
    tt.register_optimizer(opt)
    x, y = torch.randn(16, 64), torch.randn(16, 16)
    for i in range(3):
        with tt.step(i):
            tt.phase("forward")
            loss = torch.nn.functional.mse_loss(model(x), y)
            tt.phase("backward")
            loss.backward()
            tt.phase("optimizer")
            opt.step()
            opt.zero_grad(set_to_none=False)
    placement = {p.name: p for p in tt.query_placement()}
    page = tt.PAGE_SIZE
    expected = {}
    for name, p in model.named_parameters():
        for suffix, tensor, kind in (("", p, tt.WEIGHT), (".grad", p.grad, tt.GRADIENT),
                                     (".exp_avg", opt.state[p]["exp_avg"], tt.OPTIMIZER_STATE),
                                     (".exp_avg_sq", opt.state[p]["exp_avg_sq"], tt.OPTIMIZER_STATE)):
            start = (tensor.data_ptr() + page - 1) // page * page
            end = (tensor.data_ptr() + tensor.numel() * tensor.element_size()) // page * page
            if end > start:
                expected[name + suffix] = (start, end - start, kind)
            else:
                assert "smaller than a page" in c.skipped[name + suffix], (name + suffix, c.skipped)
    assert set(placement) == set(expected), sorted(set(placement) ^ set(expected))
    assert len(expected) == 8, sorted(expected)  # both weight matrices, their grads and Adam state
    for name, (start, length, kind) in expected.items():
        p = placement[name]
        assert (p.address, p.length, p.kind) == (start, length, kind), (name, p, start, length)
        assert sum(p.bytes_per_node.values()) + p.unmapped_bytes == p.length, (name, p)
        assert p.sample_stride == 1, (name, p.sample_stride)  # a few MiB: every page asked
    stats = c.stats()
    assert stats["marks_sent"] == 3 * 5, stats
    tt.shutdown()
    print(f"python_client_check: ok ({len(placement)} regions)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"python_client_check: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
