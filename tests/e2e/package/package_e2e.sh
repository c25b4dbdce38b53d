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
#     runs and that the daemon feeds systemd's watchdog;
#   - kills the daemon: systemd starts it again, ExecStopPost and ExecStartPre restore the
#     kernel's tiering and turn it off again, and the client reconnects and registers again;
#   - installs the package again: the daemon restarts onto it and the client comes back;
#   - checks that tensortierctl works for root and the socket's group only, that a reload works,
#     that a stop is clean and ExecStopPost restores the kernel's tiering, that a config that does
#     not validate fails the start and says why, that tensortierctl
#     status then starts the daemon through its socket and gets the status (the daemon answers
#     STARTING while its sources open), and that removing the package stops and removes the units.
#
# usage: package_e2e.sh BUILD_DIR            (host, as root; the build configured with
#                                             -DCMAKE_INSTALL_PREFIX=/usr, as tools/dev does)
#        package_e2e.sh --in-guest DEB       (what it runs in the VM)
set -uo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
readonly HERE

# shellcheck source-path=SCRIPTDIR source=../vm/checks.sh
source "$HERE/../vm/checks.sh"
equals() { [[ $1 == "$2" ]] || { echo "  got '$1', want '$2'" >&2; return 1; }; }

host_main() {
    local kernel=6.12
    if [[ ${1:-} == --kernel ]]; then
        kernel=${2:?--kernel needs a series}
        shift 2
    fi
    local build=${1:?usage: package_e2e.sh [--kernel SERIES] BUILD_DIR}
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
    exec "$HERE/../vm/ttvm" run --kernel "$kernel" --init systemd --topology pmem --timeout "${TT_PACKAGE_E2E_TIMEOUT:-900}" -- \
        "$HERE/package_e2e.sh" --in-guest "$deb"
}

# A client of the installed Python package, run with its memory bound to the slow node: registers
# a 16 MiB region and writes every page of it each step, with iteration marks, until the file
# named by its argument appears; prints "promoted" once the daemon has placed 95% of the region on
# node 0, and exits 0 if that happened, 1 if not. The library connects in the background when an
# attempt times out or the daemon goes away (a daemon systemd starts on that connection, or
# restarts, may take seconds under TCG), and registers the region again each time it connects;
# meanwhile a query fails with "not connected".
readonly CLIENT='
import ctypes, mmap, os, sys, time
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
deadline = time.monotonic() + 600
step = 0
promoted = False
while time.monotonic() < deadline and not os.path.exists(sys.argv[1]):
    with client.step(step):
        for off in pages:
            buf[off] = (buf[off] + 1) & 0xFF
    step += 1
    if not promoted and step % 10 == 0:
        try:
            p = client.query_placement([region])[0]
        except tt.TensortierError as e:
            print(f"step {step}: {e}", flush=True)
            continue
        fast = p.bytes_per_node.get(0, 0)
        print(f"step {step}: {p.bytes_per_node}", flush=True)
        if fast >= size * 95 // 100:
            print(f"promoted: {fast} of {size} bytes on node 0 after {step} steps", flush=True)
            promoted = True
    time.sleep(0.05)
print(f"stopped after {step} steps", flush=True)
sys.exit(0 if promoted else 1)
'

# Waits up to $1 seconds for command $2... to succeed, running it again every 0.2 s (so a test of
# a value must be a function that reads it anew); false if it never does.
wait_for() {
    local seconds=$1 i
    shift
    for ((i = 0; i < seconds * 5; i++)); do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}
registrations() { grep -c 'registered 1 region(s) with tensortierd' /tmp/client.out; }
registered_times() { (($(registrations) >= $1)); }
# Whether the service is active with a main process other than $1.
runs_other_than() {
    local now
    now=$(unit_state tensortierd.service MainPID)
    [[ $(systemctl is-active tensortierd.service) == active && $now -gt 0 && $now != "$1" ]]
}
restarted() { (($(unit_state tensortierd.service NRestarts) >= 1)) && [[ $(systemctl is-active tensortierd.service) == active ]]; }
# systemd records each watchdog ping's time; the daemon pings every 10 s (WatchdogSec=30s).
pinged_after_start() {
    (($(unit_state tensortierd.service WatchdogTimestampMonotonic) >= \
        $(unit_state tensortierd.service ExecMainStartTimestampMonotonic) + 9000000))
}

unit_state() { systemctl show -p "$2" --value "$1"; }

guest_main() {
    local deb=$1
    [[ $(cat /proc/1/comm) == systemd ]] || { echo "package_e2e: PID 1 is not systemd: run with ttvm --init systemd" >&2; exit 1; }

    echo "# dpkg -i $(basename "$deb")"
    local rc=0
    dpkg -i "$deb" >/tmp/dpkg.out 2>&1 || rc=$?
    check "the package installs (dpkg -i exit $rc)" test "$rc" -eq 0
    ((rc == 0)) || cat /tmp/dpkg.out
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
    # the unit's "+" ExecStartPre does it, and its ExecStopPost restores it after every stop.
    sysctl -q -w kernel.numa_balancing=2
    sed -i 's/^\( *kernel_tiering:\) COOPERATE/\1 DISABLE/' /etc/tensortier/tensortierd.conf
    check "the config now says DISABLE" grep -q '^ *kernel_tiering: DISABLE' /etc/tensortier/tensortierd.conf
    # The sources that write kernel files (DAMON's sysfs interface; soft-dirty's clear_refs), to
    # see that the unit's read-only /proc/sys and /sys (ProtectKernelTunables) leave them theirs.
    sed -i '/^  \(soft_dirty\|damon\) {$/,/^  }$/s/^\( *enabled:\) false$/\1 true/' /etc/tensortier/tensortierd.conf
    check "... and enables soft-dirty and DAMON" test "$(sed -n '/^  \(soft_dirty\|damon\) {$/,/^  }$/p' \
        /etc/tensortier/tensortierd.conf | grep -c 'enabled: true')" -eq 2

    echo "# a client with its region on the slow node (numactl --membind=1), refusing mbind"
    cd / || exit 1
    rm -f /tmp/client.stop
    numactl --membind=1 python3 -c "$CLIENT" /tmp/client.stop >/tmp/client.out 2>&1 &
    local client=$!
    echo "# client pid $client"
    wait_for 300 grep -q '^promoted' /tmp/client.out
    sed 's/^/#   /' /tmp/client.out | tail -n 6
    check "the client's connection started the daemon (socket activation)" \
        equals "$(systemctl is-active tensortierd.service)" active
    check "... which told systemd it was ready (Type=notify)" journal_has 'ready: serving'
    # The unit's sandbox must leave the daemon its kernel sources: under Debian's
    # kernel.perf_event_paranoid=3 that takes CAP_SYS_ADMIN (see the unit).
    check "... and opened its fault tracer under the unit's sandbox" journal_has 'sources: fault-trace: ok'
    check "... soft-dirty" journal_has 'sources: soft-dirty: ok'
    if [[ -d /sys/kernel/mm/damon/admin ]]; then
        check "... and DAMON" journal_has 'sources: damon: ok'
    else # Debian's 6.1 is built without CONFIG_DAMON_SYSFS
        check "... and says why DAMON is not there" journal_has 'sources: damon: unavailable: no DAMON sysfs'
    fi
    check "... used the installed Python package" grep -q 'package from /usr/lib/python3/dist-packages/' /tmp/client.out
    check "the sandboxed daemon moved the client's region to DRAM" grep -q '^promoted' /tmp/client.out
    check "... with the kernel's tiering off while it runs" equals "$(cat /proc/sys/kernel/numa_balancing)" 0
    check "... by the unit's ExecStartPre" journal_has 'kernel-tiering: turned off for the service (numa_balancing 2 -> 0'

    check "the daemon keeps systemd's watchdog fed" wait_for 30 pinged_after_start
    check "... not restarted on the way" equals "$(unit_state tensortierd.service NRestarts)" 0

    # A crash: systemd starts the daemon again (Restart=on-failure), ExecStopPost restores the
    # kernel's tiering and the new start's ExecStartPre turns it off again, and the client library
    # reconnects on its own and registers its region again.
    local pid
    pid=$(unit_state tensortierd.service MainPID)
    check "the daemon has a main process ($pid)" test "$pid" -gt 0
    kill -KILL "$pid"
    check "a killed daemon is started again by systemd" wait_for 60 restarted
    check "... its ExecStopPost restored the kernel's tiering in between" \
        journal_has 'kernel-tiering: restored numa_balancing=2'
    check "... and its ExecStartPre turned it off again" equals "$(cat /proc/sys/kernel/numa_balancing)" 0
    check "the client reconnected and registered its region again" wait_for 60 registered_times 2
    check "... which the new daemon lists" wait_for 10 has_client "$client"

    # An upgrade (the same package again) while the daemon runs: the postinst restarts it onto the
    # new files, and the client comes back to it again.
    pid=$(unit_state tensortierd.service MainPID)
    rc=0
    dpkg -i "$deb" >/tmp/dpkg-again.out 2>&1 || rc=$?
    check "installing the package again while the daemon runs (dpkg -i exit $rc)" test "$rc" -eq 0
    ((rc == 0)) || cat /tmp/dpkg-again.out
    check "... restarts the daemon" wait_for 60 runs_other_than "$pid"
    check "... and the client registers with the new one" wait_for 60 registered_times 3

    touch /tmp/client.stop
    local client_rc=0
    wait "$client" || client_rc=$?
    check "the client ran through (exit $client_rc)" test "$client_rc" -eq 0

    local status
    status=$(tensortierctl status 2>&1)
    check "tensortierctl status answers through the unit's socket" test -n "$status"
    echo "$status" | sed 's/^/#   /' | head -n 12
    # The socket is the access control: its group may connect, others may not.
    useradd --system --no-create-home --groups tensortier tt-member 2>/dev/null
    check "a member of group tensortier reaches the daemon" runuser -u tt-member -- tensortierctl status >/dev/null
    local refused
    refused=$(runuser -u nobody -- tensortierctl status 2>&1)
    check "anyone else is refused by the socket's mode ($(echo "$refused" | head -n 1))" \
        grep -q 'Permission denied' <<<"$refused"

    systemctl reload tensortierd.service
    check "systemctl reload reloads the config" wait_for 30 journal_has 'SIGHUP: reloaded /etc/tensortier/tensortierd.conf'
    check "... and the daemon keeps running" equals "$(systemctl is-active tensortierd.service)" active

    local pid
    pid=$(unit_state tensortierd.service MainPID)
    check "the daemon has a main process ($pid)" test "$pid" -gt 0
    systemctl stop tensortierd.service
    check "a stop ends the daemon cleanly" equals "$(unit_state tensortierd.service Result)" success
    check "... its process gone" test ! -e "/proc/$pid"
    check "ExecStopPost restored the kernel's tiering" equals "$(cat /proc/sys/kernel/numa_balancing)" 2
    check "... saying so" test "$(journal_count 'kernel-tiering: restored numa_balancing=2')" -ge 2

    # A config that does not validate: the unit's one ExecStartPre, which reads the config before
    # it changes anything, fails the start and says why; the kernel's tiering stays as it is.
    cp /etc/tensortier/tensortierd.conf /tmp/good.conf
    echo 'no_such_key: 1' >>/etc/tensortier/tensortierd.conf
    local turned_off daemon_starts
    turned_off=$(journal_count 'kernel-tiering: turned off for the service')
    daemon_starts=$(journal_count 'accepting clients; opening the sources')
    rc=0
    systemctl start tensortierd.service 2>/dev/null || rc=$?
    check "a config that does not validate fails the start (systemctl exit $rc)" test "$rc" -ne 0
    check "... with the config's error in the journal" wait_for 10 journal_has 'no_such_key'
    # The step itself refuses: a step that turned tiering off anyway would be undone by
    # ExecStopPost once the daemon failed on the same config, and the numa_balancing check alone
    # would not see it.
    check "... refused by ExecStartPre, which turned nothing off" \
        equals "$(journal_count 'kernel-tiering: turned off for the service')" "$turned_off"
    check "... so the daemon never ran" equals "$(journal_count 'accepting clients; opening the sources')" "$daemon_starts"
    check "... and the kernel's tiering is as it was" equals "$(cat /proc/sys/kernel/numa_balancing)" 2
    systemctl stop tensortierd.service # cancels Restart=on-failure's next try
    systemctl reset-failed tensortierd.service
    cp /tmp/good.conf /etc/tensortier/tensortierd.conf

    # With the daemon stopped and its socket listening, an admin's first command starts it: the
    # daemon answers STARTING while its sources open (about 1 s under TCG) and tensortierctl asks
    # again until it has the status.
    rc=0
    status=$(tensortierctl status 2>&1) || rc=$?
    check "tensortierctl status starts the stopped daemon through its socket and prints the status (exit $rc)" \
        grep -q '^tensortierd 0.1.0, up ' <<<"$status"
    # Under TCG the sources take about a second to open; the request comes well before.
    check "... which it asked for while the sources opened" wait_for 10 journal_has 'while starting: STARTING'
    systemctl stop tensortierd.service

    rc=0
    dpkg -r tensortier >/tmp/dpkg-r.out 2>&1 || rc=$?
    check "the package removes (dpkg -r exit $rc)" test "$rc" -eq 0
    ((rc == 0)) || cat /tmp/dpkg-r.out
    check "... stopping the socket" test ! -e /run/tensortier/tensortier.sock
    check "... and taking the units away" test ! -e /usr/lib/systemd/system/tensortierd.service

    if ((failed)); then
        # All of it: a failed check may concern any step (a client that did not come back after
        # a restart shows why only in its own lines and the daemon's around that restart).
        echo "# the client's output:"
        sed 's/^/#   /' /tmp/client.out
        echo "# journal of tensortierd:"
        journalctl -b --no-pager -o short-precise -u tensortierd.service -u tensortierd.socket | sed 's/^/#   /'
    fi
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

# grep reads the whole journal (not -q): an early exit would end journalctl with SIGPIPE, and the
# pipeline (pipefail) would fail on a line that is there.
journal_has() { journalctl -b --no-pager -u tensortierd.service | grep -F -- "$1" >/dev/null; }
journal_count() { journalctl -b --no-pager -u tensortierd.service | grep -cF -- "$1"; }
# Whether tensortierctl lists process $1 with one region.
has_client() { tensortierctl processes 2>/dev/null | awk -v pid="$1" '$1 == pid && $4 == 1 { found = 1 } END { exit !found }'; }

if [[ ${1:-} == --in-guest ]]; then
    guest_main "${2:?--in-guest needs the .deb}"
else
    host_main "$@"
fi
