package process

// Internals for the tests of package process_test.
var (
	NewStatus   = newStatus
	CgroupDir   = cgroupDir
	ProbeCgroup = probeCgroup
)
