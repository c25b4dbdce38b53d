#!/usr/bin/env bash
# The Debian package and its systemd units, for real: builds the .deb from a build folder with
# CPack, boots the NUMA VM with systemd as PID 1 (ttvm --init systemd: a writable overlay of the
# host root, so installing touches nothing on the host) and, in it, as an admin would:
#   - installs the package with dpkg: the group, the enabled units, the listening socket;
#   - sets kernel.numa_balancing=2 and the config's kernel_tiering to DISABLE;
#   - runs a client (the installed Python package) whose hot region lies on the slow node: its
#     connection starts the daemon through the socket, under the unit's sandbox (capability
#     bounding set, system call filter, read-only system), and the daemon itself moves the region
#     to DRAM (the client refuses mbind, so move_pages does it);
#   - checks the unit's privileged ExecStartPre turned the kernel's tiering off while the daemon
#     runs, that tensortierctl and a reload work, that a stop is clean and ExecStopPost restores
#     the kernel's tiering, and that removing the package stops and removes the units.
#
# usage: package_e2e.sh BUILD_DIR            (host, as root; the build configured with
#                                             -DCMAKE_INSTALL_PREFIX=/usr, as tools/dev does)
#        package_e2e.sh --in-guest DEB       (what it runs in the VM)
set -uo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
readonly HERE

passed=0 failed=0
check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok   - $what"
        passed=$((passed + 1))
    else
        echo "FAIL - $what"
        failed=$((failed + 1))
    fi
}
equals() { [[ $1 == "$2" ]] || { echo "  got '$1', want '$2'" >&2; return 1; }; }

host_main() {
    local build=${1:?usage: package_e2e.sh BUILD_DIR}
    build=$(cd "$build" && pwd) || exit 2
    ((EUID == 0)) || { echo "package_e2e: needs root (the VM test bed runs as root)" >&2; exit 1; }
    local prefix
    prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
    if [[ $prefix != /usr ]]; then
        echo "package_e2e: $build is configured with CMAKE_INSTALL_PREFIX=$prefix; the package needs /usr (its config goes to /etc): reconfigure with -DCMAKE_INSTALL_PREFIX=/usr (tools/dev does)" >&2
        exit 1
    fi
    # Under the build folder, not /tmp: the guest sees the host's files, but mounts its own /tmp.
    local out=$build/tests/e2e/package/deb
    rm -rf "$out"
    mkdir -p "$out"
    (cd "$build" && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || {
        cat "$out/cpack.log" >&2
        echo "package_e2e: cpack failed" >&2
        exit 1
    }
    local debs=("$out"/tensortier_*_amd64.deb)
    local deb=${debs[0]}
    [[ -e $deb ]] || { echo "package_e2e: cpack made no .deb in $out" >&2; exit 1; }
    echo "# package: $deb ($(stat -c %s "$deb") bytes)"
    cd "$build" || exit 1
    exec "$HERE/../vm/ttvm" run --init systemd --topology pmem --timeout "${TT_PACKAGE_E2E_TIMEOUT:-900}" -- \
        "$HERE/package_e2e.sh" --in-guest "$deb"
}

# A client of the installed Python package, run with its memory bound to the slow node: registers
# a 16 MiB region, writes every page of it each step with iteration marks, and exits 0 once the
# daemon has placed 95% of it on node 0 (printing the placement), 1 if that never happens. The
# library connects in the background when the first attempt times out (a daemon that systemd
# starts on that connection may take longer under TCG), so a query may find it not connected yet.
readonly CLIENT='
import ctypes, mmap, sys, time
import tensortier as tt
print("tensortier package from", tt.__file__, flush=True)
size = 16 << 20
buf = mmap.mmap(-1, size)
address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
pages = range(0, size, mmap.PAGESIZE)
for off in pages:
    buf[off] = 1
client = tt.Client(name="package-e2e", accepts_mbind=False)
region = client.register(address, size, name="weights", kind=tt.WEIGHT)
deadline = time.monotonic() + float(sys.argv[1])
step = 0
while time.monotonic() < deadline:
    with client.step(step):
        for off in pages:
            buf[off] = (buf[off] + 1) & 0xFF
    step += 1
    if step % 10 == 0:
        try:
            p = client.query_placement([region])[0]
        except tt.TensortierError as e:  # the first connect can outlast a socket-activated start
            print(f"step {step}: {e}", flush=True)
            continue
        fast = p.bytes_per_node.get(0, 0)
        print(f"step {step}: {p.bytes_per_node}", flush=True)
        if fast >= size * 95 // 100:
            print(f"promoted: {fast} of {size} bytes on node 0 after {step} steps", flush=True)
            sys.exit(0)
    time.sleep(0.05)
print("never promoted", flush=True)
sys.exit(1)
'

unit_state() { systemctl show -p "$2" --value "$1"; }

guest_main() {
    local deb=$1
    [[ $(cat /proc/1/comm) == systemd ]] || { echo "package_e2e: PID 1 is not systemd: run with ttvm --init systemd" >&2; exit 1; }

    echo "# dpkg -i $(basename "$deb")"
    local rc=0
    dpkg -i "$deb" >/tmp/dpkg.out 2>&1 || rc=$?
    check "the package installs (dpkg -i exit $rc)" test "$rc" -eq 0 || cat /tmp/dpkg.out
    check "its postinst made the socket's group" getent group tensortier
    check "... enabled the socket" equals "$(systemctl is-enabled tensortierd.socket)" enabled
    check "... and the service" equals "$(systemctl is-enabled tensortierd.service)" enabled
    check "... and started the socket" equals "$(systemctl is-active tensortierd.socket)" active
    check "the socket is group tensortier, mode 660" \
        equals "$(stat -c '%F %G %a' /run/tensortier/tensortier.sock 2>&1)" "socket tensortier 660"
    check "the daemon waits for its first client" equals "$(systemctl is-active tensortierd.service)" inactive
    check "the shipped config passes --check-config" \
        tensortierd --check-config --config /etc/tensortier/tensortierd.conf

    # The kernel's own tiering on, and the config asks the daemon to turn it off while it runs:
    # only the unit's "+" ExecStartPre may write the sysctl (the daemon lacks CAP_SYS_ADMIN).
    sysctl -q -w kernel.numa_balancing=2
    sed -i 's/^\( *kernel_tiering:\) COOPERATE/\1 DISABLE/' /etc/tensortier/tensortierd.conf
    check "the config now says DISABLE" grep -q '^ *kernel_tiering: DISABLE' /etc/tensortier/tensortierd.conf

    echo "# a client with its region on the slow node (numactl --membind=1), refusing mbind"
    cd / || exit 1
    local client_rc=0
    numactl --membind=1 timeout 400 python3 -c "$CLIENT" 300 >/tmp/client.out 2>&1 || client_rc=$?
    sed 's/^/#   /' /tmp/client.out | tail -n 8
    check "the client's connection started the daemon (socket activation)" \
        equals "$(systemctl is-active tensortierd.service)" active
    check "... which told systemd it was ready (Type=notify)" journal_has 'ready: serving'
    # The unit's sandbox must leave the daemon its kernel sources: under Debian's
    # kernel.perf_event_paranoid=3 that takes CAP_SYS_ADMIN (see the unit).
    check "... and opened its fault tracer under the unit's sandbox" journal_has 'sources: fault-trace: ok'
    check "... used the installed Python package" grep -q 'package from /usr/lib/python3/dist-packages/' /tmp/client.out
    check "the sandboxed daemon moved the client's region to DRAM (client exit $client_rc)" test "$client_rc" -eq 0
    check "... with the kernel's tiering off while it runs" equals "$(cat /proc/sys/kernel/numa_balancing)" 0
    check "... not restarted on the way" equals "$(unit_state tensortierd.service NRestarts)" 0

    local status
    status=$(tensortierctl status 2>&1)
    check "tensortierctl status answers through the unit's socket" test -n "$status"
    echo "$status" | sed 's/^/#   /' | head -n 12

    systemctl reload tensortierd.service
    sleep 2
    check "systemctl reload reloads the config" journal_has 'SIGHUP: reloaded /etc/tensortier/tensortierd.conf'
    check "... and the daemon keeps running" equals "$(systemctl is-active tensortierd.service)" active

    local pid
    pid=$(unit_state tensortierd.service MainPID)
    systemctl stop tensortierd.service
    check "a stop ends the daemon cleanly" equals "$(unit_state tensortierd.service Result)" success
    check "... its process gone" test ! -e "/proc/$pid"
    check "ExecStopPost restored the kernel's tiering" equals "$(cat /proc/sys/kernel/numa_balancing)" 2

    rc=0
    dpkg -r tensortier >/tmp/dpkg-r.out 2>&1 || rc=$?
    check "the package removes (dpkg -r exit $rc)" test "$rc" -eq 0 || cat /tmp/dpkg-r.out
    check "... stopping the socket" test ! -e /run/tensortier/tensortier.sock
    check "... and taking the units away" test ! -e /usr/lib/systemd/system/tensortierd.service

    if ((failed)); then
        echo "# journal of tensortierd:"
        journalctl -b --no-pager -u tensortierd.service -u tensortierd.socket | tail -n 60 | sed 's/^/#   /'
    fi
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

journal_has() { journalctl -b --no-pager -u tensortierd.service | grep -qF -- "$1"; }

if [[ ${1:-} == --in-guest ]]; then
    guest_main "${2:?--in-guest needs the .deb}"
else
    host_main "$@"
fi
