package harness

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
)

// Usage is a snapshot of what this process has used so far.
type Usage struct {
	// CPU is user plus system time of the whole process.
	CPU time.Duration
	// Mallocs and AllocBytes are the Go heap's cumulative allocation counters.
	Mallocs    uint64
	AllocBytes uint64
}

// ReadUsage reads the process's CPU time and allocation counters. It stops
// the world briefly (runtime.ReadMemStats): call it around a measurement,
// not inside one.
func ReadUsage() Usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Usage{
		CPU:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		Mallocs:    ms.Mallocs,
		AllocBytes: ms.TotalAlloc,
	}
}

// PeakRSS measures the resident set's high-water mark over a window of
// this process's life. On Linux it resets the kernel's mark at Start
// (writing 5 to /proc/self/clear_refs) and reads VmHWM at Peak, so the
// figure is the window's own. Where that is not possible it falls back to
// getrusage's maxrss, which is the high-water mark of the whole process
// so far; Windowed says which one Peak returns.
type PeakRSS struct {
	Windowed bool
}

// StartPeakRSS returns the heap to the OS (so what earlier work left
// resident does not count) and starts a window.
func StartPeakRSS() PeakRSS {
	runtime.GC()
	debug.FreeOSMemory()
	err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return PeakRSS{Windowed: err == nil}
}

// Peak is the resident set's high-water mark in bytes (see PeakRSS).
func (p PeakRSS) Peak() int64 {
	if p.Windowed {
		if v, ok := procStatusBytes("VmHWM:"); ok {
			return v
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss * 1024 // kilobytes on Linux
}

// procStatusBytes reads a "<key> <n> kB" line of /proc/self/status.
func procStatusBytes(key string) (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(key)) {
			continue
		}
		f := bytes.Fields(line[len(key):])
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		return n * 1024, true
	}
	return 0, false
}

// Machine describes where a run happened.
type Machine struct {
	CPU        string `json:"cpu"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	// MemTotal is the machine's memory in bytes (0 if unknown).
	MemTotal int64 `json:"mem_total"`
}

// ThisMachine describes the machine this process runs on.
func ThisMachine() Machine {
	m := Machine{
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := bytes.Cut(sc.Bytes(), []byte(":")); ok && string(bytes.TrimSpace(k)) == "model name" {
				m.CPU = string(bytes.TrimSpace(v))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := bytes.Fields(sc.Bytes()); len(f) >= 2 && string(f[0]) == "MemTotal:" {
				if n, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
					m.MemTotal = n * 1024
				}
			}
		}
	}
	return m
}
