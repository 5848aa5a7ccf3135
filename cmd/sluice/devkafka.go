package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/consumer/devkafka"
)

func newDevKafka(g *globals) *cobra.Command {
	var (
		addr     string
		topics   []string
		dataDir  string
		srAddr   string
		defParts int32
		maxBytes int
	)
	cmd := &cobra.Command{
		Use:   "dev-kafka",
		Short: "Run an embedded Kafka-protocol broker for local development and tests",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if defParts < 1 {
				return usageErr("--default-partitions %d: at least 1", defParts)
			}
			if maxBytes < 1 {
				return usageErr("--max-message-bytes %d: a positive number of bytes", maxBytes)
			}
			cfg := devkafka.Config{Addr: addr, DataDir: dataDir, Topics: map[string]int32{}, Logger: log,
				DefaultPartitions: defParts, MaxMessageBytes: maxBytes}
			for _, t := range topics {
				name, parts, err := devkafka.ParseTopic(t)
				if err != nil {
					return usageErr("--topic %q: %v", t, err)
				}
				cfg.Topics[name] = parts
			}
			b, err := devkafka.Start(cfg)
			if err != nil {
				return err
			}
			defer b.Close()
			fmt.Fprintf(g.stdout, "dev-kafka listening on %s\n", b.Addr())
			if srAddr != "" {
				reg, err := devkafka.StartRegistry(srAddr)
				if err != nil {
					return fmt.Errorf("--schema-registry %s: %w", srAddr, err)
				}
				defer reg.Close()
				fmt.Fprintf(g.stdout, "schema registry (in memory) at %s\n", reg.URL())
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9092", "listen address (port 0 picks a free port)")
	cmd.Flags().StringArrayVar(&topics, "topic", nil, "create a topic NAME[:PARTITIONS] (repeatable)")
	cmd.Flags().StringVar(&srAddr, "schema-registry", "", "also serve an in-memory Confluent Schema Registry on this address (e.g. 127.0.0.1:8081)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the log in this folder so it survives a restart (default in memory)")
	cmd.Flags().Int32Var(&defParts, "default-partitions", 1, "partitions of a topic created by a producer's first produce to it")
	cmd.Flags().IntVar(&maxBytes, "max-message-bytes", devkafka.DefaultMaxMessageBytes, "the largest record batch a produce may carry (Kafka's message.max.bytes)")
	return cmd
}
