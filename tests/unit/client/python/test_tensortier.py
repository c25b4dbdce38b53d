"""The Python package (ctypes over libtensortier.so.1) with Debian's torch, against the fake daemon
process tt_fake_client_daemon. Run by ctest (unit.client.python) with /usr/bin/python3 and
TENSORTIER_LIB, TT_FAKE_DAEMON and PYTHONPATH set."""

import gc
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import torch

import tensortier as tt

PAGE = tt.PAGE_SIZE


def whole_pages(t):
    """The (start, length) the package registers for tensor t: the whole pages inside it."""
    start = (t.data_ptr() + PAGE - 1) // PAGE * PAGE
    end = (t.data_ptr() + t.numel() * t.element_size()) // PAGE * PAGE
    return (start, end - start) if end > start else None


class FakeDaemon:
    """tt_fake_client_daemon driven over its stdin/stdout (one JSON line per command)."""

    def __init__(self, socket_path):
        exe = os.environ.get("TT_FAKE_DAEMON")
        if not exe:
            raise RuntimeError("TT_FAKE_DAEMON is not set: run these tests through ctest (unit.client.python)")
        self.proc = subprocess.Popen([exe, "--socket", socket_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        ready = json.loads(self.proc.stdout.readline())
        assert ready["event"] == "ready", ready

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def regions(self):
        return self.cmd("regions")["regions"]

    def marks(self):
        return self.cmd("marks")["marks"]

    def wait_for(self, predicate, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.01)
        return predicate()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        self.proc.stdout.close()


class TensortierTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tt-py-test-")
        self.socket = os.path.join(self.dir, "tensortier.sock")
        self.fake = None

    def tearDown(self):
        tt.shutdown()
        if self.fake:
            self.fake.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_fake(self):
        self.fake = FakeDaemon(self.socket)
        return self.fake

    def client(self, **kw):
        kw.setdefault("socket_path", self.socket)
        kw.setdefault("reconnect_initial_ms", 10)
        kw.setdefault("reconnect_max_ms", 50)
        return tt.Client(**kw)

    def test_loads_the_library_named_by_TENSORTIER_LIB(self):
        self.assertEqual(os.path.realpath(tt.library_path()), os.path.realpath(os.environ["TENSORTIER_LIB"]))
        self.assertTrue(tt.version().startswith("1."))

    def test_register_tensor_round_trip(self):
        fake = self.start_fake()
        with self.client(name="py-test") as c:
            self.assertTrue(c.connected)
            self.assertEqual(c.protocol_version, 1)
            t = torch.zeros(4 * PAGE // 4, dtype=torch.float32)
            region = c.register_tensor(t, tt.WEIGHT, "t")
            self.assertIsNotNone(region)
            regions = fake.regions()
            self.assertEqual(len(regions), 1)
            self.assertEqual((regions[0]["address"], regions[0]["length"]), whole_pages(t))
            self.assertGreaterEqual(regions[0]["length"], 3 * PAGE)
            self.assertEqual(regions[0]["kind"], int(tt.WEIGHT))
            self.assertEqual(regions[0]["name"], "t")
            hellos = fake.cmd("hellos")["hellos"]
            self.assertEqual(hellos[0]["name"], "py-test")
            self.assertTrue(hellos[0]["accepts_mbind"])
            # A tensor holding no whole page is not registered, and says why.
            small = torch.zeros(16)
            self.assertIsNone(c.register_tensor(small, tt.ACTIVATION, "small"))
            self.assertIn("smaller than a page", c.skipped["small"])
            self.assertEqual(len(fake.regions()), 1)
            # Garbage-collecting the tensor unregisters its region.
            del t
            gc.collect()
            self.assertTrue(fake.wait_for(lambda: fake.regions() == []))
            self.assertEqual(c.stats()["regions_live"], 0)

    def test_daemon_rejection_raises_on_the_raw_call(self):
        self.start_fake()
        with self.client() as c:
            t = torch.zeros(256)
            c.register(t.data_ptr(), 1024, "a", tt.WEIGHT)
            with self.assertRaises(tt.TensortierError) as cm:
                c.register(t.data_ptr() + 512, 1024, "b", tt.WEIGHT)
            self.assertEqual(cm.exception.status_name, "TENSORTIER_ERR_DAEMON_REGION_OVERLAPS")
            with self.assertRaises(tt.TensortierError) as cm:
                c.register(0, 10, "null")
            self.assertEqual(cm.exception.code, 1)

    def test_module_params_grads_and_adam_state(self):
        fake = self.start_fake()
        torch.manual_seed(0)
        # Weights of 32 KiB and 8 KiB (whole pages inside them); biases of 512 and 64 bytes (none).
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        c = tt.init(socket_path=self.socket, name="tiny-mlp")
        weights = tt.register_module(model)
        tt.register_optimizer(opt)
        self.assertEqual([r.name for r in weights], ["0.weight", "2.weight"])
        self.assertEqual(sorted(r["name"] for r in fake.regions()), ["0.weight", "2.weight"])
        self.assertIn("smaller than a page", c.skipped["0.bias"])

        x, y = torch.randn(32, 64), torch.randn(32, 16)
        for i in range(2):
            with tt.step(i):
                tt.phase("forward")
                loss = torch.nn.functional.mse_loss(model(x), y)
                tt.phase("backward")
                loss.backward()
                tt.phase("optimizer")
                opt.step()
                opt.zero_grad(set_to_none=False)

        by_name = {r["name"]: r for r in fake.regions()}
        expected = {}
        for name, p in model.named_parameters():
            expected[name] = (p, tt.WEIGHT)
            expected[name + ".grad"] = (p.grad, tt.GRADIENT)
            expected[name + ".exp_avg"] = (opt.state[p]["exp_avg"], tt.OPTIMIZER_STATE)
            expected[name + ".exp_avg_sq"] = (opt.state[p]["exp_avg_sq"], tt.OPTIMIZER_STATE)
        registered = 0
        for name, (tensor, kind) in expected.items():
            span = whole_pages(tensor)
            if span is None:
                self.assertNotIn(name, by_name)
                self.assertIn("smaller than a page", c.skipped[name])
                continue
            registered += 1
            self.assertEqual((by_name[name]["address"], by_name[name]["length"]), span, name)
            self.assertEqual(by_name[name]["kind"], int(kind), name)
        # Both weight matrices with their gradients and Adam state, and nothing else.
        self.assertEqual(registered, 8)
        self.assertEqual(len(by_name), registered)

        self.assertTrue(fake.wait_for(lambda: len(fake.marks()) == 2 * 5))
        marks = fake.marks()
        self.assertEqual([(m["type"], m["step"], m["phase"]) for m in marks[:5]],
                         [(1, 0, ""), (3, 0, "forward"), (3, 0, "backward"), (3, 0, "optimizer"), (2, 0, "")])
        self.assertEqual(marks[9], {"type": 2, "step": 1, "phase": "", "session": marks[0]["session"]})

        # Gradients freed by zero_grad(set_to_none=True) are unregistered at the next refresh.
        opt.zero_grad(set_to_none=True)
        tt.client().refresh()
        names = {r["name"] for r in fake.regions()}
        self.assertFalse(any(n.endswith(".grad") for n in names), names)
        self.assertEqual(len(names), 6)

        placement = tt.query_placement()
        self.assertEqual(len(placement), 6)
        self.assertTrue(all(p.bytes_per_node == {0: p.length} for p in placement))

    def test_mbind_request_is_carried_out(self):
        fake = self.start_fake()
        with self.client() as c:
            t = torch.ones(4 * 4096 // 4)
            c.register_tensor(t, tt.ACTIVATION, "act")
            rid = fake.regions()[0]["id"]
            self.assertEqual(fake.cmd(f"mbind {rid} 0")["errno"], 0)
            self.assertEqual(c.stats()["mbind_done"], 1)

    def test_daemon_absent_calls_are_no_ops_with_one_warning(self):
        warnings = []
        tt.set_log_handler(lambda level, msg: warnings.append(msg) if level >= 2 else None)
        try:
            with self.client() as c:  # nothing listens on self.socket
                self.assertFalse(c.connected)
                keep = [torch.zeros(4 * PAGE // 4) for _ in range(20)]
                for i, t in enumerate(keep):
                    self.assertIsNotNone(c.register_tensor(t, tt.WEIGHT, f"w{i}"))
                    with c.step(i):
                        c.phase_begin("forward")
                with self.assertRaises(tt.TensortierError) as cm:
                    c.query_placement()
                self.assertEqual(cm.exception.status_name, "TENSORTIER_ERR_UNAVAILABLE")
                time.sleep(0.2)  # several reconnect attempts: none warns again
                s = c.stats()
                self.assertEqual(s["regions_live"], 20)
                self.assertEqual(s["marks_dropped"], 60)
        finally:
            tt.set_log_handler(None)
        self.assertEqual(len(warnings), 1, warnings)

    def test_daemon_restart_re_registers_live_regions(self):
        fake = self.start_fake()
        with self.client() as c:
            tensors = [torch.zeros(4 * PAGE // 4) for _ in range(3)]
            for i, t in enumerate(tensors):
                c.register_tensor(t, tt.WEIGHT, f"w{i}")
            self.assertEqual(len(fake.regions()), 3)
            self.assertTrue(fake.cmd("stop")["ok"])
            self.assertTrue(fake.wait_for(lambda: not c.connected))
            late = torch.zeros(4 * PAGE // 4)
            c.register_tensor(late, tt.GRADIENT, "late")
            self.assertTrue(fake.cmd("start")["ok"])
            self.assertTrue(fake.wait_for(lambda: len(fake.regions()) == 4))
            got = {r["name"]: (r["address"], r["length"]) for r in fake.regions()}
            self.assertEqual(got, {"w0": whole_pages(tensors[0]), "w1": whole_pages(tensors[1]),
                                   "w2": whole_pages(tensors[2]), "late": whole_pages(late)})


if __name__ == "__main__":
    unittest.main()
