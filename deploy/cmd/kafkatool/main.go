// Command kafkatool is the Kafka image's health check and topic job
// (deploy/docker/kafka.Dockerfile). The image is built from the broker's
// Maven jars, which do not include Kafka's command-line tools, and a JVM per
// health check would cost a core-second every ten seconds, so these two
// small jobs are done in Go:
//
//	kafkatool ready kafka:19092                         # a metadata round trip; exit 0 when a broker answers
//	kafkatool create-topics -bootstrap kafka:19092 -partitions 12 topic...
//
// create-topics creates each missing topic and leaves existing ones alone,
// then prints every topic with its partition count.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "ready":
		if len(os.Args) != 3 {
			usage()
		}
		err = ready(os.Args[2])
	case "create-topics":
		err = createTopics(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkatool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kafkatool ready HOST:PORT | kafkatool create-topics -bootstrap HOST:PORT -partitions N TOPIC...")
	os.Exit(2)
}

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.ClientID = "kafkatool"
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 10 * time.Second
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Full = true
	return cfg
}

// ready asks the broker for the cluster's metadata: a broker that answers
// has finished starting (an open port alone says less).
func ready(addr string) error {
	client, err := sarama.NewClient([]string{addr}, config())
	if err != nil {
		return fmt.Errorf("metadata from %s: %w", addr, err)
	}
	defer client.Close()
	if len(client.Brokers()) == 0 {
		return fmt.Errorf("%s answered with no broker", addr)
	}
	if _, err := client.Controller(); err != nil {
		return fmt.Errorf("%s: no controller yet: %w", addr, err)
	}
	return nil
}

func createTopics(args []string) error {
	fs := flag.NewFlagSet("create-topics", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "broker address")
	partitions := fs.Int("partitions", 12, "partitions of each topic created")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bootstrap == "" || fs.NArg() == 0 || *partitions < 1 {
		usage()
	}
	var admin sarama.ClusterAdmin
	var err error
	for attempt := 1; ; attempt++ { // the broker may still be electing its controller
		if admin, err = sarama.NewClusterAdmin([]string{*bootstrap}, config()); err == nil || attempt == 10 {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *bootstrap, err)
	}
	defer admin.Close()
	for _, topic := range fs.Args() {
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(*partitions), ReplicationFactor: 1}, false)
		switch {
		case err == nil:
			fmt.Printf("created %s (%d partitions)\n", topic, *partitions)
		case errors.Is(err, sarama.ErrTopicAlreadyExists):
			fmt.Printf("exists  %s\n", topic)
		default:
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	topics, err := admin.ListTopics()
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !strings.HasPrefix(name, "__") {
			fmt.Printf("topic %s: %d partitions\n", name, topics[name].NumPartitions)
		}
	}
	return nil
}
