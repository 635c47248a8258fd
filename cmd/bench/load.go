package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// The hot-item load runs in a child process (this binary again, with
// loadChildEnv set), so that the benchmark's CPU time (getrusage of the
// process that serves the functions) holds the functions' work only, not
// the clients'.
const loadChildEnv = "ENGAGEMENT_BENCH_LOAD_CHILD"

// loadJob is what the parent sends the child on stdin: a PUT of Body per
// token, answered 200; or, with Pushes, a POST of each push body, answered
// 204 (a Pub/Sub push acknowledged).
type loadJob struct {
	URL         string   `json:"url"`
	Body        string   `json:"body"`
	Tokens      []string `json:"tokens"`
	Pushes      []string `json:"pushes,omitempty"`
	Concurrency int      `json:"concurrency"`
}

// hotLoad is the hot-item load: one like of the item "hot" per token, sent
// to the server at base by concurrency clients.
func hotLoad(base string, tokens []string, concurrency int) loadJob {
	return loadJob{URL: base + "/v1/reactions/hot", Body: `{"reaction":"like"}`, Tokens: tokens, Concurrency: concurrency}
}

// loadResult is what the child answers on stdout.
type loadResult struct {
	Elapsed  time.Duration `json:"elapsed"`
	Failures int64         `json:"failures"`
	FirstErr string        `json:"firstErr,omitempty"`
}

// runLoadChild is the child's main: it reads one job, sends its requests
// from job.Concurrency clients (each retried up to five times), and writes
// the result.
func runLoadChild() {
	var job loadJob
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&job); err != nil {
		fmt.Fprintln(os.Stderr, "bench load child:", err)
		os.Exit(2)
	}
	method, want, n := http.MethodPut, http.StatusOK, len(job.Tokens)
	if job.Pushes != nil {
		method, want, n = http.MethodPost, http.StatusNoContent, len(job.Pushes)
	}
	start := time.Now()
	failures, first := sendAll(newClient(job.Concurrency), job.Concurrency, n, want, func(i int) (string, string, string, string) {
		if job.Pushes != nil {
			return method, job.URL, "", job.Pushes[i]
		}
		return method, job.URL, job.Tokens[i], job.Body
	})
	res := loadResult{Elapsed: time.Since(start), Failures: failures, FirstErr: first}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(2)
	}
	os.Exit(0)
}

// loadChild is a started child waiting for its job.
type loadChild struct {
	cmd *exec.Cmd
	in  *os.File
	out *json.Decoder
	job []byte // encoded
}

// startLoadChild starts the child and encodes its job before the measured
// window, so that neither costs the window anything (the job of 4,000
// users is megabytes of tokens).
func startLoadChild(job loadJob) (*loadChild, error) {
	b, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), loadChildEnv+"=1")
	cmd.Stderr = os.Stderr
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = inR
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the load child: %w", err)
	}
	inR.Close()
	return &loadChild{cmd: cmd, in: inW, out: json.NewDecoder(out), job: b}, nil
}

// run sends the job and waits for the result.
func (c *loadChild) run() (loadResult, error) {
	var res loadResult
	_, err := c.in.Write(c.job)
	c.in.Close()
	if err == nil {
		err = c.out.Decode(&res)
	}
	if werr := c.cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return res, fmt.Errorf("load child: %w", err)
	}
	return res, nil
}

// sendAll sends request(i) — method, URL, token, body — for i in [0, n)
// from conc clients of c, each tried up to six times 50 ms apart until it is
// answered want, and returns how many never were and the first such answer.
func sendAll(c *http.Client, conc, n, want int, request func(i int) (method, url, token, body string)) (failures int64, first string) {
	var failed atomic.Int64
	var firstAnswer atomic.Value
	forEach(conc, n, func(i int) error {
		method, url, token, body := request(i)
		for attempt := 0; ; attempt++ {
			code, b, err := do(c, method, url, token, body)
			if err == nil && code == want {
				return nil
			}
			if attempt == 5 {
				failed.Add(1)
				firstAnswer.CompareAndSwap(nil, fmt.Sprintf("%d %s %v", code, b, err))
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	first, _ = firstAnswer.Load().(string)
	return failed.Load(), first
}

// forEach runs f(0..n-1) on conc goroutines and returns the first error.
func forEach(conc, n int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}
