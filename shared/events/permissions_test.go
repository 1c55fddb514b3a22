package events_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

// authNATS is an embedded JetStream server whose users and permissions are exactly the
// chart's: the authorization block of events.AuthorizationConf, passwords from the environment.
type authNATS struct {
	url       string
	passwords map[events.Service]string
	dir       string
}

func startAuthNATS(t *testing.T) *authNATS {
	t.Helper()
	dir := t.TempDir()
	a := &authNATS{dir: dir, passwords: map[events.Service]string{}}
	for _, s := range events.Users() {
		pw := "pw-" + string(s) + "-0123456789"
		a.passwords[s] = pw
		t.Setenv(events.PasswordVariable(s), pw)
	}
	conf := "listen: 127.0.0.1:-1\njetstream {\n  store_dir: " + `"` + filepath.Join(dir, "js") + `"` + "\n}\n" +
		events.AuthorizationConf()
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("load the generated nats.conf: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("create NATS server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	a.url = srv.ClientURL()
	return a
}

// client is one service's connection, with the asynchronous errors the server sent it.
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

// connectAs connects as service s with its password file, the way the services do.
func (a *authNATS) connectAs(t *testing.T, s events.Service) *client {
	t.Helper()
	file := filepath.Join(a.dir, string(s)+".password")
	if err := os.WriteFile(file, []byte(a.passwords[s]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := events.Auth{User: string(s), PasswordFile: file}
	c := &client{errs: make(chan error, 16)}
	opts := append(auth.Options(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case c.errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(a.url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", s, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// permissionError waits for the server's permissions violation on c.
func (c *client) permissionError(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-c.errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("%s: got %v, want a permissions violation", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the server reported no permissions violation", what)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConnectionsWithoutTheRightPasswordAreRefused(t *testing.T) {
	a := startAuthNATS(t)
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{name: "a client without credentials is refused"},
		{name: "a service with a wrong password is refused",
			opts: events.Auth{User: "node-agent", PasswordFile: wrong}.Options()},
		{name: "a user the catalog does not know is refused",
			opts: events.Auth{User: "operator", PasswordFile: wrong}.Options()},
		{name: "the audit user with a wrong password is refused",
			opts: events.Auth{User: "audit", PasswordFile: wrong}.Options()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(a.url, tc.opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected, want an authorization violation")
			}
			if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("got %v, want an authorization violation", err)
			}
		})
	}
}

// TestEachServicePublishesOnlyTheTypesItProduces publishes every type of the catalog as every
// service: the stream stores exactly the produced ones.
func TestEachServicePublishesOnlyTheTypesItProduces(t *testing.T) {
	a := startAuthNATS(t)
	// The first service to connect creates the stream, as the Outbox does.
	first := a.connectAs(t, events.ServiceCSIController)
	stream, err := events.EnsureStream(ctxFor(t, 10*time.Second), first.js, events.StreamConfig{})
	if err != nil {
		t.Fatalf("a service creates the stream: %v", err)
	}
	for _, s := range events.Services() {
		c := a.connectAs(t, s)
		owned := map[events.Type]bool{}
		for _, typ := range events.Produces(s) {
			owned[typ] = true
		}
		for _, typ := range events.Types() {
			name := string(s) + " may not publish " + string(typ)
			if owned[typ] {
				name = string(s) + " publishes " + string(typ) + " into the stream"
			}
			t.Run(name, func(t *testing.T) {
				node := ""
				if typ.NodeScoped() {
					node = "node-1"
				}
				e := mustNew(t, payload(typ, node))
				data, err := events.Encode(e)
				if err != nil {
					t.Fatal(err)
				}
				subject, err := events.Subject(typ, node)
				if err != nil {
					t.Fatal(err)
				}
				before := streamMsgs(t, stream)
				_, err = c.js.Publish(ctxFor(t, 500*time.Millisecond), subject, data, jetstream.WithMsgID(e.ID()))
				if owned[typ] {
					if err != nil {
						t.Fatalf("publish: %v", err)
					}
					if got := streamMsgs(t, stream); got != before+1 {
						t.Fatalf("stream holds %d messages, want %d", got, before+1)
					}
					return
				}
				if err == nil {
					t.Fatal("publish acknowledged, want it refused")
				}
				c.permissionError(t, "publish "+subject)
				if got := streamMsgs(t, stream); got != before {
					t.Fatalf("stream holds %d messages, want %d: the refused event was stored", got, before)
				}
			})
		}
	}
}

func streamMsgs(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestServicesReadOnlyWhatTheyConsume runs the real consumers of the node-agent and the
// janitor as their users, and checks that reading anything else is refused.
func TestServicesReadOnlyWhatTheyConsume(t *testing.T) {
	a := startAuthNATS(t)
	reconciler := a.connectAs(t, events.ServicePodReconciler)
	if _, err := events.EnsureStream(ctxFor(t, 10*time.Second), reconciler.js, events.StreamConfig{}); err != nil {
		t.Fatalf("a service creates the stream: %v", err)
	}

	t.Run("the node-agent's consumer receives what the pod-reconciler publishes for its node", func(t *testing.T) {
		agent := a.connectAs(t, events.ServiceNodeAgent)
		got := make(chan *events.Decoded, 1)
		c, err := events.NewConsumer(agent.js, events.ConsumerConfig{
			Durable:        events.NodeAgentDurable("node-1"),
			FilterSubjects: events.NodeSubjects("node-1", events.Consumes(events.ServiceNodeAgent)...),
		}, func(_ context.Context, d *events.Decoded) error {
			select {
			case got <- d:
			default:
			}
			return nil
		}, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Start(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start returned %v, want nil after its context ended", err)
			}
		}()
		e := mustNew(t, payload(events.TypeAttachmentAssigned, "node-1"))
		data, _ := events.Encode(e)
		subject, _ := events.Subject(events.TypeAttachmentAssigned, "node-1")
		if _, err := reconciler.js.Publish(ctxFor(t, 5*time.Second), subject, data); err != nil {
			t.Fatalf("publish: %v", err)
		}
		select {
		case d := <-got:
			if d.Event.ID() != e.ID() {
				t.Fatalf("received %s, want %s", d.Event.ID(), e.ID())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the node-agent's consumer received nothing")
		}
	})

	for _, svc := range events.Services() {
		t.Run("the "+string(svc)+" may not change the stream's limits", func(t *testing.T) {
			c := a.connectAs(t, svc)
			_, err := c.js.UpdateStream(ctxFor(t, time.Second), jetstream.StreamConfig{
				Name: events.StreamName, Subjects: []string{events.SubjectPrefix + ".>"}, MaxAge: time.Minute,
			})
			if err == nil {
				t.Fatal("stream updated, want it refused")
			}
			c.permissionError(t, "update stream "+events.StreamName)
		})
	}

	t.Run("the janitor's consumer is created with the janitor's filters", func(t *testing.T) {
		j := a.connectAs(t, events.ServiceJanitor)
		if _, err := j.js.CreateOrUpdateConsumer(ctxFor(t, 5*time.Second), events.StreamName, jetstream.ConsumerConfig{
			Durable: events.JanitorDurable, FilterSubjects: events.NodeSubjects("", events.Consumes(events.ServiceJanitor)...),
			AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			t.Fatalf("create the janitor's consumer: %v", err)
		}
	})

	for _, tc := range []struct {
		name    string
		service events.Service
		durable string
	}{
		{name: "the pod-reconciler, which consumes nothing, may not create a consumer",
			service: events.ServicePodReconciler, durable: "pod-reconciler"},
		{name: "the csi-controller, which consumes nothing, may not create a consumer",
			service: events.ServiceCSIController, durable: "csi-controller"},
		{name: "a node-agent may not take over the janitor's consumer",
			service: events.ServiceNodeAgent, durable: events.JanitorDurable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := a.connectAs(t, tc.service)
			_, err := c.js.CreateOrUpdateConsumer(ctxFor(t, time.Second), events.StreamName, jetstream.ConsumerConfig{
				Durable: tc.durable, FilterSubjects: []string{events.SubjectPrefix + ".>"}, AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err == nil {
				t.Fatal("consumer created, want it refused")
			}
			c.permissionError(t, "create consumer "+tc.durable)
		})
	}

	for _, tc := range []struct {
		name    string
		service events.Service
		subject string
	}{
		{name: "the node-agent may not subscribe to volume.created, which it does not consume",
			service: events.ServiceNodeAgent, subject: events.TypeVolumeCreated.Stem()},
		{name: "the janitor may not subscribe to attachment.assigned, which it does not consume",
			service: events.ServiceJanitor, subject: events.TypeAttachmentAssigned.Stem() + ".node-1"},
		{name: "the pod-reconciler may not subscribe to any event",
			service: events.ServicePodReconciler, subject: events.SubjectPrefix + ".>"},
		{name: "a node-agent may not read the replies the pod-reconciler receives",
			service: events.ServiceNodeAgent, subject: events.InboxPrefix(events.ServicePodReconciler) + ".>"},
		{name: "the janitor may not read every service's replies",
			service: events.ServiceJanitor, subject: "_INBOX.>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := a.connectAs(t, tc.service)
			sub, err := c.nc.SubscribeSync(tc.subject)
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			c.permissionError(t, "subscribe "+tc.subject)
		})
	}
}

func TestThePermissionsCoverEveryServiceAndType(t *testing.T) {
	produced := map[events.Type]bool{}
	for _, s := range events.Services() {
		if _, err := events.PermissionsOf(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
		for _, typ := range events.Produces(s) {
			produced[typ] = true
		}
	}
	for _, typ := range events.Types() {
		if !produced[typ] {
			t.Errorf("no service may publish %s", typ)
		}
	}
	if _, err := events.PermissionsOf("operator"); err == nil {
		t.Error("an unknown service got permissions")
	}
}

// TestTheChartAuthorizationIsGeneratedFromThePermissions keeps the chart's nats.conf users in
// step with PermissionsOf: the chart cannot call Go, so the file is generated (`make generate`
// runs this test with -update) and this test fails when it drifts.
func TestTheChartAuthorizationIsGeneratedFromThePermissions(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "charts", "s3csi", "files", "nats-authorization.conf")
	want := events.AuthorizationConf()
	if *update {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil { //nolint:gosec // a chart file, not a secret
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read %s (generate it with `make generate`): %v", file, err)
	}
	if string(got) != want {
		t.Errorf("%s differs from events.AuthorizationConf(); run `make generate` and review the diff", file)
	}
}
