// The in-kernel path's data_src reader on a real kernel without a PMU, shared by the privileged
// test (the host's kernel) and the e2e test (the VM's 6.12 and 6.1).
#pragma once

#include "core/Types.h"

namespace tt::test {

// A software page-fault source asking for PERF_SAMPLE_DATA_SRC, aggregated in kernel, samples a
// child touching every third page of its buffer. Events that record data_src get the program that
// reads the tier from the kernel's sample: through bpf_cast_to_kern_ctx on 6.2+, probe reads on 6.1.
// The kernel has no data_src for a software sample: 6.1-6.2 leave the field unset (sample_flags
// says so), 6.3+ fill in PERF_MEM_NA before the program runs. Checks (gtest failures) that the
// expected reader loaded, every touched page is reported (precision and recall >= 0.95) with the
// event's kind `eventKind` and no tier, and that on 6.3+ the program read "not available" from
// every sample, which shows it reads the sample's own field.
void checkTierReaderOnSoftwareFaults(AccessKind eventKind);

}  // namespace tt::test
