package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// processCPU returns the CPU time (user and system) this process has used
// so far, every thread included.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// pidCPU returns the CPU time (user and system) process pid has used so
// far, from /proc/<pid>/stat (its own threads; not its children's).
func pidCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(data))
}

// parseProcStatCPU returns utime + stime of a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so fields are counted after its last ')': utime and
// stime are fields 14 and 15 of the line, the 12th and 13th after it.
func parseProcStatCPU(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no ')' closing the command name")
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: utime or stime %q is not a number", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / clockTicks), nil
}

// cpuSample is the CPU time of this process, and of the server process
// when there is one, at one moment.
type cpuSample struct {
	process, server time.Duration
}

// cpuWindow is the CPU used over a measurement window.
type cpuWindow struct {
	// process and server are the CPU time used inside the window by this
	// process and by the server's process (0 without one).
	process, server time.Duration
	// err is the first sample that failed; the window then has no measure.
	err error
}

// sampleCPU samples the CPU time at from and at to, on a goroutine of its
// own (the load's goroutines are busy publishing at both moments), and
// sends the difference once to has passed, or the context's error. pid is
// the server's process, 0 for none (the server is this process's).
func sampleCPU(ctx context.Context, from, to time.Time, pid int) <-chan cpuWindow {
	out := make(chan cpuWindow, 1)
	take := func() (cpuSample, error) {
		var s cpuSample
		var err error
		if s.process, err = processCPU(); err != nil {
			return s, err
		}
		if pid > 0 {
			if s.server, err = pidCPU(pid); err != nil {
				return s, fmt.Errorf("server process %d: %w", pid, err)
			}
		}
		return s, nil
	}
	wait := func(at time.Time) error {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	go func() {
		if err := wait(from); err != nil {
			out <- cpuWindow{err: err}
			return
		}
		a, err := take()
		if err == nil {
			err = wait(to)
		}
		var b cpuSample
		if err == nil {
			b, err = take()
		}
		if err != nil {
			out <- cpuWindow{err: err}
			return
		}
		out <- cpuWindow{process: b.process - a.process, server: b.server - a.server}
	}()
	return out
}

// perCallUS returns d per call in microseconds (0 for no calls).
func perCallUS(d time.Duration, calls int) float64 {
	if calls <= 0 {
		return 0
	}
	return round(float64(d)/1e3/float64(calls), 1)
}

// cores returns d over the window's length: the cores kept busy on average.
func cores(d, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return round(float64(d)/float64(window), 3)
}
