package kafkabroker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultVersion is the Apache Kafka version StartApache runs when
// ApacheOptions.Version is empty.
const DefaultVersion = "4.1.1"

// slf4jSimpleVersion is the logging backend added to the broker class path;
// the published Kafka POM brings only slf4j-api, without which the broker
// starts silently and says nothing when it fails.
const slf4jSimpleVersion = "1.7.36"

// completeMarker names the file written into a lib directory once every jar
// is in place. Its presence means the cache is usable without Maven.
const completeMarker = ".complete"

// DefaultCacheDir returns the jar cache directory used when none is given:
// os.UserCacheDir()/usagebilling/kafka-<version>.
func DefaultCacheDir(version string) (string, error) {
	if version == "" {
		version = DefaultVersion
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find user cache dir: %w", err)
	}
	return filepath.Join(base, "usagebilling", "kafka-"+version), nil
}

// EnsureJars makes sure cacheDir/lib holds the runtime class path of Apache
// Kafka version (kafka_2.13 and its runtime dependencies plus slf4j-simple)
// and returns that directory. The first call fetches the jars from Maven
// Central with `mvn dependency:copy-dependencies`; once the directory is
// complete, later calls return at once without running Maven. Concurrent
// callers, in this process or others, are serialized by a lock file, and the
// jars are copied into a temporary directory that is renamed into place, so
// an interrupted fetch never leaves a half-filled lib directory behind.
// An empty cacheDir means DefaultCacheDir(version); an empty version means
// DefaultVersion.
func EnsureJars(ctx context.Context, cacheDir, version string, log *slog.Logger) (libDir string, err error) {
	log = orDiscard(log)
	if version == "" {
		version = DefaultVersion
	}
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(version); err != nil {
			return "", err
		}
	}
	libDir = filepath.Join(cacheDir, "lib")
	if complete(libDir) {
		return libDir, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create kafka jar cache %s: %w", cacheDir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, ".lock"), log)
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(libDir) { // another process finished while we waited
		return libDir, nil
	}
	// Holding the lock, any fetch dir is a leftover of a killed fetch.
	if stale, _ := filepath.Glob(filepath.Join(cacheDir, "fetch-*")); len(stale) > 0 {
		for _, d := range stale {
			_ = os.RemoveAll(d)
		}
	}

	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("fetch kafka %s jars: maven (mvn) is not on PATH; install it or fill %s by hand and create %s in it: %w",
			version, libDir, completeMarker, err)
	}
	work, err := os.MkdirTemp(cacheDir, "fetch-")
	if err != nil {
		return "", fmt.Errorf("create kafka jar fetch dir: %w", err)
	}
	defer os.RemoveAll(work)
	pom := filepath.Join(work, "pom.xml")
	if err := os.WriteFile(pom, []byte(pomXML(version)), 0o644); err != nil {
		return "", fmt.Errorf("write kafka pom: %w", err)
	}
	tmpLib := filepath.Join(work, "lib")

	log.Info("fetching kafka jars from maven central", "version", version, "cache", cacheDir)
	began := time.Now()
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "-f", pom,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+tmpLib)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("fetch kafka %s jars with maven: %w\n%s", version, err, lastLines(out.String(), 30))
	}
	jars, _ := filepath.Glob(filepath.Join(tmpLib, "kafka_2.13-*.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("fetch kafka %s jars: maven finished but %s holds no kafka_2.13 jar", version, tmpLib)
	}
	if err := os.WriteFile(filepath.Join(tmpLib, completeMarker), []byte(version+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("mark kafka jars complete: %w", err)
	}
	if err := os.RemoveAll(libDir); err != nil { // an incomplete leftover from an older layout
		return "", fmt.Errorf("remove incomplete kafka lib dir: %w", err)
	}
	if err := os.Rename(tmpLib, libDir); err != nil {
		return "", fmt.Errorf("move kafka jars into place: %w", err)
	}
	log.Info("fetched kafka jars", "version", version, "lib", libDir, "took", time.Since(began).Round(time.Millisecond))
	return libDir, nil
}

func complete(libDir string) bool {
	_, err := os.Stat(filepath.Join(libDir, completeMarker))
	return err == nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait. The returned function releases it.
func lockFile(ctx context.Context, path string, log *slog.Logger) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !logged {
			log.Info("waiting for another process to finish fetching kafka jars", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func pomXML(version string) string {
	return strings.NewReplacer("@KAFKA@", version, "@SLF4J@", slf4jSimpleVersion).Replace(`<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.usagebilling</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>@KAFKA@</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>@SLF4J@</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.6.1</version>
      </plugin>
    </plugins>
  </build>
</project>
`)
}

// lastLines returns at most n trailing lines of s.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
