# Checks for the shell tests of the VM test bed (selftest.sh) and of what runs in it
# (tests/e2e/package): `check WHAT CMD ARGS...` runs the command and prints "ok   - WHAT" or
# "FAIL - WHAT", counting both in `passed` and `failed`. It returns 0 either way, so that a
# failed check does not end a script under `set -e`; print what explains a failure separately.
# Sourced (bash).

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
