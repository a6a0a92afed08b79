package testserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// clusterNodeArgs are the arguments that make a Redis server a cluster
// node. 5 s is the node timeout docs/scaling.md's figures assume.
var clusterNodeArgs = []string{
	"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
}

// formCluster makes the empty cluster nodes at addrs one cluster, as
// `redis-cli --cluster create --cluster-replicas 0` does: distinct
// configuration epochs, the 16384 slots split evenly in order, every node
// introduced to the first. It returns once every node sees the cluster
// whole (cluster_state:ok, every node known, every slot assigned, no
// handshake pending), or with ctx's error and what the first node says.
func formCluster(ctx context.Context, addrs []string) error {
	const slots = 16384
	for i, a := range addrs {
		if _, err := redisDo(ctx, a, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", a, err)
		}
		args := []string{"CLUSTER", "ADDSLOTS"}
		for s := i * slots / len(addrs); s < (i+1)*slots/len(addrs); s++ {
			args = append(args, strconv.Itoa(s))
		}
		if _, err := redisDo(ctx, a, args...); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTS on %s: %w", a, err)
		}
	}
	host, port, _ := strings.Cut(addrs[0], ":")
	for _, a := range addrs[1:] {
		if _, err := redisDo(ctx, a, "CLUSTER", "MEET", host, port); err != nil {
			return fmt.Errorf("CLUSTER MEET on %s: %w", a, err)
		}
	}
	want := []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(len(addrs))}
	for {
		why := clusterWhole(ctx, addrs, want)
		if why == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Redis Cluster %s did not form: %v", strings.Join(addrs, ","), why)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clusterWhole returns nil when every node's CLUSTER INFO has the lines in
// want and its CLUSTER NODES shows no node still in a handshake or failed.
func clusterWhole(ctx context.Context, addrs, want []string) error {
	for _, a := range addrs {
		info, err := redisDo(ctx, a, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		lines := "\n" + strings.ReplaceAll(info, "\r", "") + "\n"
		for _, w := range want {
			if !strings.Contains(lines, "\n"+w+"\n") {
				return fmt.Errorf("%s: CLUSTER INFO lacks %s", a, w)
			}
		}
		nodes, err := redisDo(ctx, a, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
			f := strings.Fields(l)
			if len(f) < 8 || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "fail") || f[7] != "connected" {
				return fmt.Errorf("%s: CLUSTER NODES: %s", a, l)
			}
		}
	}
	return nil
}
