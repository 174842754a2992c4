package process

import "io"

// Internals for the tests of package process_test.
var (
	CgroupDir   = cgroupDir
	ProbeCgroup = probeCgroup
	EnableV2    = enableV2
	EventCount  = eventCount
	Owner       = owner
	OwnerAlive  = ownerAlive
	StatFields  = statFields
)

// Probes are the inputs of newStatus, for tests.
type Probes struct {
	ABI                        int
	ABIErr, SeccompErr, NetErr error
	TmpErr                     error
	ZygoteErr                  error
	Cgroup                     string
	CgroupErr                  error
	V2                         []string
	V1                         map[string]string
	CeilErr                    error
}

// NewStatus is newStatus over p.
func NewStatus(p Probes, network NetworkMode) SandboxStatus {
	return newStatus(probes{
		abi: p.ABI, abiErr: p.ABIErr, seccompErr: p.SeccompErr, netnsErr: p.NetErr, tmpErr: p.TmpErr, zygoteErr: p.ZygoteErr,
		cgroup: p.Cgroup, cgErr: p.CgroupErr, ceil: ceilings{v2: p.V2, v1: p.V1}, ceilErr: p.CeilErr,
	}, network)
}

// V1Dirs is v1Dirs.
func V1Dirs(mountinfo io.Reader, procCgroup string) map[string]string {
	return v1Dirs(mountinfo, procCgroup)
}

// V2Limits and V1Limits are v2Limits and v1Limits.
var (
	V2Limits = v2Limits
	V1Limits = v1Limits
)

// Floorless makes r confine its children without the floor, as the
// runner did before the floor bound them: the control of the floor's
// attack tests.
func Floorless(r *Runner) *Runner {
	r.floorless = true
	return r
}
