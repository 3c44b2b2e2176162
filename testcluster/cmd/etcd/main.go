// Command etcd runs a single-member etcd server, embedded from
// go.etcd.io/etcd/server/v3, for the test control plane: it listens on
// loopback only and keeps its data in the folder it is given.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dir := flag.String("data-dir", "", "folder of etcd's data")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL clients connect to")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL of the (only) peer")
	flag.Parse()
	if *dir == "" {
		log.Fatal("etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "verdict-test"
	cfg.Dir = *dir
	cfg.LogLevel = "warn"
	clientURL, err := url.Parse(*client)
	if err != nil {
		log.Fatalf("etcd: --listen-client-url: %v", err)
	}
	peerURL, err := url.Parse(*peer)
	if err != nil {
		log.Fatalf("etcd: --listen-peer-url: %v", err)
	}
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, peerURL.String())
	// A test cluster's history is short; keep the database small.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	select {
	case <-server.Server.ReadyNotify():
		log.Printf("etcd: serving clients on %s", clientURL)
	case <-time.After(60 * time.Second):
		server.Close()
		log.Fatal("etcd: not ready within 60s")
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-server.Err():
		log.Fatalf("etcd: %v", err)
	case <-stop:
		server.Close()
	}
}
