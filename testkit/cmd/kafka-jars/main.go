// Command kafka-jars fetches the Apache Kafka broker jars from Maven Central
// into the user cache (once; later runs find them there), so that tests and
// the local stack can start a real broker without a network.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/usagebilling/billing/testkit/kafkabroker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	dir, err := kafkabroker.DefaultCacheDir(kafkabroker.DefaultVersion)
	if err == nil {
		dir, err = kafkabroker.EnsureJars(ctx, dir, kafkabroker.DefaultVersion, log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka-jars:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
