#!/bin/bash
# ttvm stage 2: runs as root in the chroot of the host root inside the guest (see guest-init), or,
# with --init systemd, as systemd's ttvm-run.service on an overlay of it.
# ttvm copies this file into the per-run share, mounted here at /run/ttvm, together with:
#   config   TT_TOPOLOGY, TT_CWD and the command as the array TT_CMD (bash syntax, sourced)
#   env      `export NAME=VALUE` lines for the command's environment (sourced)
# It prepares the memory topology, then runs the command and writes into the share:
#   started       created just before the command starts (its host mtime gives the boot time)
#   stdout stderr the command's output streams
#   status        the command's exit status, written last
#   setup-error   instead of all that, when the topology could not be set up
# (guest-init also writes int3-handler into the share, in the background while this runs: see
# there. Unless ttvm knew those addresses before the boot (TT_INT3_HANDLER_KNOWN=1 in config),
# the command starts only once the file is there.)
# The kernel console is for humans (ttvm --verbose); ttvm reads only crash reports from it.
# "A && B || setup_failed" is meant: fail when either step fails.
# shellcheck disable=SC2015
set -uo pipefail

readonly SHARE=/run/ttvm
readonly TIERS=/sys/devices/virtual/memory_tiering

log() { echo "ttvm-guest: $*" >/dev/console; }

setup_failed() {
    echo "$*" >"$SHARE/setup-error"
    log "FATAL: $*"
    exit 1
}

# Turns the emulated NVDIMM (NUMA node 1) into system RAM through the kmem driver, the way
# Optane in "KMEM DAX" mode is used, so the kernel ranks node 1 as a slower memory tier.
online_nvdimm_as_kmem() {
    ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/console 2>&1 ||
        setup_failed "NUMA node 1 never came online: ndctl create-namespace -m devdax failed"
    local devs=(/sys/bus/dax/devices/dax*)
    [[ -e ${devs[0]} ]] || setup_failed "NUMA node 1 never came online: no dax device after ndctl create-namespace"
    local dev=${devs[0]##*/}

    case $(uname -r) in
    6.1.*)
        daxctl reconfigure-device --mode=system-ram --no-online "$dev" >/dev/console 2>&1 &&
            daxctl online-memory "$dev" >/dev/console 2>&1 ||
            setup_failed "NUMA node 1 never came online: daxctl could not online $dev as system RAM"
        ;;
    *)
        # Newer kernels with Debian 12's daxctl: reconfigure-device fails with EBUSY, so hand the
        # device to kmem through sysfs; online_offline_memory then onlines the new blocks.
        echo "$dev" >/sys/bus/dax/drivers/device_dax/unbind &&
            echo "$dev" >/sys/bus/dax/drivers/kmem/new_id ||
            setup_failed "NUMA node 1 never came online: could not rebind $dev from device_dax to kmem"
        ;;
    esac
}

# Onlines every memory block still offline (the kmem'd NVDIMM on 6.12, the pc-dimm of node 2)
# as movable, like daxctl does: it holds no kernel allocations and can be offlined again.
online_offline_memory() {
    local state
    for state in /sys/devices/system/memory/memory*/state; do
        if [[ $(<"$state") == offline ]]; then
            echo online_movable >"$state" || setup_failed "could not online ${state%/state}"
        fi
    done
}

# Prints the memory tier id (N of memory_tierN) that holds NUMA node $1, nothing if none.
tier_of_node() {
    local node=$1 dir part
    for dir in "$TIERS"/memory_tier*; do
        [[ -r $dir/nodelist ]] || continue
        local IFS=,
        for part in $(<"$dir/nodelist"); do
            if [[ $part == *-* ]] && ((node >= ${part%-*} && node <= ${part#*-})) ||
                [[ $part == "$node" ]]; then
                echo "${dir##*memory_tier}"
                return
            fi
        done
    done
}

node_mem_kb() {
    awk '/MemTotal/ { print $4 }' "/sys/devices/system/node/node$1/meminfo" 2>/dev/null
}

require_node_memory() {
    local kb
    kb=$(node_mem_kb "$1")
    ((${kb:-0} > 0)) || setup_failed "NUMA node $1 never came online (no memory on node $1)"
}

# Fails loudly unless node 1 sits in a slower (higher-numbered) memory tier than node 0.
verify_slow_tier() {
    local t0 t1
    t0=$(tier_of_node 0)
    t1=$(tier_of_node 1)
    [[ -n $t0 && -n $t1 ]] && ((t1 > t0)) ||
        setup_failed "node 1 is not in a lower memory tier than node 0 (node 0: tier '${t0}', node 1: tier '${t1}')"
}

# Records what the tests care about on the console, for --verbose and --keep-log.
log_memory_layout() {
    local dir
    for dir in "$TIERS"/memory_tier*; do
        [[ -r $dir/nodelist ]] && log "${dir##*/}: nodes $(<"$dir/nodelist")"
    done
    local n
    for n in /sys/devices/system/node/node[0-9]*; do
        log "${n##*/}: cpus '$(<"$n/cpulist")', $(node_mem_kb "${n##*node}") kB"
    done
    log "kernel.numa_balancing=$(</proc/sys/kernel/numa_balancing)" \
        "demotion_enabled=$(cat /sys/kernel/mm/numa/demotion_enabled 2>/dev/null)"
}

main() {
    # shellcheck source=/dev/null
    source "$SHARE/config"

    case $TT_TOPOLOGY in
    pmem)
        online_nvdimm_as_kmem
        online_offline_memory
        require_node_memory 1
        verify_slow_tier
        ;;
    pmem+cxl)
        online_nvdimm_as_kmem
        online_offline_memory
        require_node_memory 1
        require_node_memory 2
        verify_slow_tier
        ;;
    plain) ;;
    hmat)
        # The firmware's figures must have reached sysfs, or the run tests nothing HMAT-specific.
        [[ -r /sys/devices/system/node/node1/access0/initiators/read_latency ]] ||
            setup_failed "hmat: no HMAT access figures for node 1 in /sys/devices/system/node/node1/access0"
        ;;
    two-socket)
        local node
        for node in 1 2 3; do require_node_memory "$node"; done
        ;;
    *) setup_failed "unknown topology '$TT_TOPOLOGY'" ;;
    esac
    log_memory_layout

    cd "$TT_CWD" 2>/dev/null ||
        setup_failed "working directory $TT_CWD does not exist in the guest (is it under /tmp, /run, /dev, /proc or /sys, which the guest replaces?)"

    # Only once ttvm can tell a hang on the emulator's stray int3 (int3-handler: where the
    # handler lies, which guest-init reads in the background, unless ttvm had it from an earlier
    # boot of this kernel). Started before, a command that flips a static key at once could hang
    # the guest before the addresses were out, and the hang then stalled their reading for good:
    # ttvm waited for --timeout (seen in CI on 6.1). A plain topology waits up to about 2 s; the
    # others' setup takes longer than the reading.
    local tenths=0
    while [[ ${TT_INT3_HANDLER_KNOWN:-0} != 1 && ! -e $SHARE/int3-handler ]] && ((tenths < 600)); do
        sleep 0.1
        tenths=$((tenths + 1))
    done
    : >"$SHARE/started"
    (
        # The command sees only the environment ttvm wrote, not this init's leftovers.
        # shellcheck disable=SC2046
        unset $(compgen -e)
        # shellcheck source=/dev/null
        source "$SHARE/env"
        exec "${TT_CMD[@]}"
    ) >"$SHARE/stdout" 2>"$SHARE/stderr" </dev/null
    local rc=$?
    # Written to a temporary name first so the host never reads a half-written status.
    echo "$rc" >"$SHARE/status.tmp" && mv "$SHARE/status.tmp" "$SHARE/status"
    log "command exited $rc"
}

main
