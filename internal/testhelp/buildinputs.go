package testhelp

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

var buildInputs struct {
	once sync.Once
	n    int
	err  error
}

// RecordBuildInputs names, as inputs of the running test, the sources of
// a binary the test built from this module at run time (go build in
// TestMain): every non-test Go file, go.mod and go.sum of the module that
// holds the working directory. go test's result cache keys on the test
// binary and on the files the test reads inside the module; it cannot
// see a binary built by the test, and would otherwise replay a cached
// pass after the sources changed. Call it from a test (inside m.Run,
// where reads are recorded), once or many times; it returns how many
// files it read.
func RecordBuildInputs() (int, error) {
	buildInputs.once.Do(func() {
		buildInputs.n, buildInputs.err = recordBuildInputs()
	})
	return buildInputs.n, buildInputs.err
}

func recordBuildInputs() (int, error) {
	root, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(root)
		if up == root {
			return 0, errors.New("testhelp: no go.mod above the working directory")
		}
		root = up
	}
	n := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if (strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) || (filepath.Dir(p) == root && (name == "go.mod" || name == "go.sum")) {
			if _, err := os.Stat(p); err != nil { // recorded by go test
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
