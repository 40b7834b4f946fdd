// temporal-server: a real Temporal server (go.temporal.io/server v1.29.1, the version the
// Temporal CLI v1.5.1 pins) in one process, with SQLite persistence and a frontend that serves
// TLS and requires client certificates (mutual TLS). It is onceflow's secured local stack's
// Temporal (issue 14); scripts/temporal-server.sh builds and runs it.
//
// It follows the shape of the CLI's dev server (temporalcli/devserver/server.go): all four
// services (frontend, history, matching, worker) in this process, static membership, one
// history shard, SQLite schema set up on first start, namespaces pre-registered in the database.
// What differs is the TLS configuration and that the frontend's HTTP API is off.
//
// What is encrypted and what is not:
//   - encrypted, mTLS: the frontend gRPC port (-port), the only port clients use. The server
//     presents -tls-cert/-tls-key and requires a client certificate that verifies against
//     -tls-ca (tls.RequireAndVerifyClientCert); a connection without one, or with one from
//     another CA, fails in the handshake.
//   - encrypted, mTLS: the server's own system worker (scheduler, batch operations, ...) dials
//     the frontend like any client, with -client-cert/-client-key, verifying the server
//     certificate against -tls-ca.
//   - encrypted, mTLS: the Web UI's (optional, -ui-port) connection to the frontend.
//   - NOT encrypted: internode gRPC between the services inside this process (frontend ->
//     history/matching, history <-> matching), on ephemeral ports bound to 127.0.0.1 only.
//     Static membership, so there is no gossip port.
//   - NOT encrypted: the Web UI itself is plain HTTP on 127.0.0.1:<ui-port> (no login); it
//     is a local development convenience.
//   - The SQLite file is plain on disk (it is a local file, like the dev server's).
//
// No secrets are in this file: certificates and keys are read from the paths given.
package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

const clusterName = "active"

// onceflow's custom search attributes (the dev server registers the same with --search-attribute).
var searchAttributes = map[string]enumspb.IndexedValueType{
	"OnceflowPipeline":  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"OnceflowPartition": enumspb.INDEXED_VALUE_TYPE_INT,
	"OnceflowEpoch":     enumspb.INDEXED_VALUE_TYPE_INT,
	"OnceflowPhase":     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

func main() {
	ip := flag.String("ip", "127.0.0.1", "IP every listener binds to")
	port := flag.Int("port", 7233, "frontend gRPC port (TLS, client certificate required)")
	uiPort := flag.Int("ui-port", 0, "Web UI port (plain HTTP); 0 = no UI")
	db := flag.String("db", "", "SQLite database file (created with the schema if missing)")
	namespaces := flag.String("namespaces", "default", "comma-separated namespaces to register")
	tlsCert := flag.String("tls-cert", "", "frontend server certificate (PEM)")
	tlsKey := flag.String("tls-key", "", "frontend server private key (PEM)")
	tlsCA := flag.String("tls-ca", "", "CA that client certificates must chain to; also verifies the server for internal clients")
	clientCert := flag.String("client-cert", "", "client certificate (PEM) for the system worker and the Web UI")
	clientKey := flag.String("client-key", "", "client private key (PEM) for the system worker and the Web UI")
	serverName := flag.String("server-name", "localhost", "name internal clients verify the server certificate against")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	flag.Parse()

	for name, v := range map[string]string{"db": *db, "tls-cert": *tlsCert, "tls-key": *tlsKey,
		"tls-ca": *tlsCA, "client-cert": *clientCert, "client-key": *clientKey} {
		if v == "" {
			fatal("missing -%s", name)
		}
	}
	logger := log.NewZapLogger(log.BuildZapLogger(log.Config{Level: *logLevel, Format: "console"}))
	frontend := net.JoinHostPort(*ip, fmt.Sprint(*port))

	// Persistence: one SQLite file for executions and visibility; schema on first start.
	sqlConf := &config.SQL{
		PluginName:        sqliteplugin.PluginName,
		DatabaseName:      *db,
		ConnectAttributes: map[string]string{"mode": "rwc"},
	}
	if _, err := os.Stat(*db); os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Dir(*db), 0o700); err != nil {
			fatal("creating the database directory: %v", err)
		}
		if err := sqliteschema.SetupSchema(sqlConf); err != nil {
			fatal("setting up the SQLite schema: %v", err)
		}
	}
	// Namespaces with the custom search attributes mapped onto SQLite's predefined columns.
	// Already registered namespaces are left as they are (CreateNamespaces skips them).
	var nsConfigs []*sqliteschema.NamespaceConfig
	for _, ns := range strings.Split(*namespaces, ",") {
		c, err := sqliteschema.NewNamespaceConfig(clusterName, strings.TrimSpace(ns), false, searchAttributes)
		if err != nil {
			fatal("namespace %q: %v", ns, err)
		}
		nsConfigs = append(nsConfigs, c)
	}
	if err := sqliteschema.CreateNamespaces(sqlConf, nsConfigs...); err != nil {
		fatal("registering namespaces: %v", err)
	}

	conf := &config.Config{}
	conf.Global.Membership.MaxJoinDuration = 30e9 // 30 s
	conf.Global.Membership.BroadcastAddress = *ip
	conf.Global.TLS = config.RootTLS{
		// Frontend listener: TLS with this certificate; mTLS against the CA.
		Frontend: config.GroupTLS{Server: config.ServerTLS{
			CertFile:          *tlsCert,
			KeyFile:           *tlsKey,
			ClientCAFiles:     []string{*tlsCA},
			RequireClientAuth: true,
		}},
		// The system worker's connection to the frontend: client certificate + CA check.
		SystemWorker: config.WorkerTLS{
			CertFile: *clientCert,
			KeyFile:  *clientKey,
			Client:   config.ClientTLS{ServerName: *serverName, RootCAFiles: []string{*tlsCA}},
		},
		// Internode is left empty: plain gRPC on loopback inside this process (see above).
	}
	conf.Persistence.DefaultStore = "sqlite"
	conf.Persistence.VisibilityStore = "sqlite"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite": {SQL: sqlConf}}
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{clusterName: {
			Enabled:                true,
			InitialFailoverVersion: 1,
			RPCAddress:             frontend,
			// Used only when the metadata is first written; later starts keep the stored one.
			ClusterID: newUUID(),
		}},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	// The frontend on the given port; HTTPPort 0 turns the frontend's HTTP API off (it would be
	// one more port to secure, and onceflow's SDK clients use gRPC). History, matching and the
	// worker service get free loopback ports.
	conf.Services = map[string]config.Service{"frontend": {RPC: config.RPC{GRPCPort: *port, BindOnIP: *ip}}}
	hosts := map[primitives.ServiceName]static.Hosts{primitives.FrontendService: static.SingleLocalHost(frontend)}
	for _, svc := range []primitives.ServiceName{primitives.HistoryService, primitives.MatchingService, primitives.WorkerService} {
		p := freePort(*ip)
		conf.Services[string(svc)] = config.Service{RPC: config.RPC{GRPCPort: p, BindOnIP: *ip}}
		hosts[svc] = static.SingleLocalHost(net.JoinHostPort(*ip, fmt.Sprint(p)))
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The system worker dials the frontend at this address with the SystemWorker TLS above.
	conf.PublicClient.HostPort = frontend

	dyn := dynamicconfig.StaticClient{
		// Eager activity execution: an activity scheduled by a workflow task comes back in
		// the response to that task's completion (as in scripts/services.sh's dev server).
		dynamicconfig.EnableActivityEagerExecution.Key(): true,
		// Nexus needs the frontend's HTTP API, which is off here; onceflow does not use Nexus.
		dynamicconfig.EnableNexus.Key(): false,
		// As the CLI's dev server: search attributes visible at once, a larger history cache.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():      true,
		dynamicconfig.FrontendPersistenceMaxQPS.Key():                    10000,
		dynamicconfig.HistoryPersistenceMaxQPS.Key():                     45000,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8096,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
	}

	server, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithDynamicConfigClient(dyn),
	)
	if err != nil {
		fatal("creating the server: %v", err)
	}
	if err := server.Start(); err != nil {
		fatal("starting the server: %v", err)
	}

	// Optional Web UI: plain HTTP, talking to the frontend with the client certificate.
	var ui *uiserver.Server
	if *uiPort != 0 {
		ui = uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
			Host:                *ip,
			Port:                *uiPort,
			TemporalGRPCAddress: frontend,
			EnableUI:            true,
			CORS:                uiconfig.CORS{CookieInsecure: true},
			HideLogs:            true,
			TLS: uiconfig.TLS{
				CaFile:                 *tlsCA,
				CertFile:               *clientCert,
				KeyFile:                *clientKey,
				ServerName:             *serverName,
				EnableHostVerification: true,
			},
		}))
		go func() {
			if err := ui.Start(); err != nil {
				logger.Error("Web UI failed", tag.Error(err))
			}
		}()
	}
	logger.Warn("onceflow temporal-server started", tag.NewStringTag("frontend", frontend+" (mTLS)"),
		tag.NewInt("ui-port", *uiPort), tag.NewStringTag("db", *db))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s := <-sig
	logger.Warn("stopping", tag.NewStringTag("signal", s.String()))
	if ui != nil {
		ui.Stop()
	}
	server.Stop()
}

// freePort asks the kernel for a free TCP port on ip (a small race until the service binds it).
func freePort(ip string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		fatal("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "temporal-server: "+format+"\n", args...)
	os.Exit(1)
}
