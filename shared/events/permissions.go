package events

import (
	"fmt"
	"sort"
	"strings"
)

// Service names a service that connects to the bus; it is also its NATS user name. The users
// of kubectl s3csi (UserAudit, UserReplay) are Services too: they have a user, a password and
// permissions, but they produce no event and hold no durable consumer.
type Service string

// The services on the bus.
const (
	ServiceCSIController Service = "csi-controller"
	ServicePodReconciler Service = "pod-reconciler"
	ServiceNodeAgent     Service = "node-agent"
	ServiceJanitor       Service = "janitor"
)

// The users of kubectl s3csi.
const (
	// UserAudit reads the stream (kubectl s3csi events) and may do nothing else.
	UserAudit Service = "audit"
	// UserReplay reads the stream and republishes events under ReplaySubjectPrefix, into the
	// ReplayStreamName stream it may create (kubectl s3csi replay). It may not publish any event
	// type on a live subject.
	UserReplay Service = "replay"
)

// The stream of replayed events. Its subjects are the live ones with ReplaySubjectPrefix in
// place of SubjectPrefix; no service reads them.
const (
	ReplayStreamName    = "S3CSI_REPLAY"
	ReplaySubjectPrefix = "s3csi.replay"
)

// Services returns every service on the bus, in a stable order.
func Services() []Service {
	return []Service{ServiceCSIController, ServicePodReconciler, ServiceNodeAgent, ServiceJanitor}
}

// Users returns every NATS user of the bus, in a stable order: the services, then the users of
// kubectl s3csi.
func Users() []Service {
	return append(Services(), UserAudit, UserReplay)
}

// JanitorDurable is the durable consumer the janitor's replicas share. The node-agent's is per
// node: NodeAgentDurable(node).
const JanitorDurable = "janitor"

// NodeAgentDurable is the durable consumer of the node-agent on node.
func NodeAgentDurable(node string) string { return "node-agent-" + NodeToken(node) }

// role is what one service does on the bus: the event types it publishes, the event types its
// durable consumer reads, and that consumer's durable name as one subject token ("*" when it
// varies, as the node-agent's does per node).
type role struct {
	produces []Type
	consumes []Type
	durable  string
}

// roleOf is a switch rather than a package map so that no package state can be mutated.
func roleOf(s Service) (role, bool) {
	switch s {
	case ServiceCSIController:
		return role{produces: []Type{TypeVolumeCreated, TypeVolumeDeleted}}, true
	case ServicePodReconciler:
		return role{produces: []Type{TypeWorkloadScheduled, TypeAttachmentAssigned, TypeMountpointNeedsUnmount}}, true
	case ServiceNodeAgent:
		return role{
			produces: []Type{TypeVolumePublished, TypeVolumeUnpublished, TypeMountFailed},
			consumes: []Type{TypeAttachmentAssigned, TypeMountpointNeedsUnmount},
			durable:  "*",
		}, true
	case ServiceJanitor:
		return role{
			produces: []Type{TypeMountpointNeedsUnmount, TypeAttachmentCleaned},
			consumes: []Type{TypeVolumeUnpublished, TypeMountFailed, TypeMountpointNeedsUnmount},
			durable:  JanitorDurable,
		}, true
	}
	return role{}, false
}

// Produces returns the event types s publishes (nil for an unknown service).
func Produces(s Service) []Type { r, _ := roleOf(s); return r.produces }

// Consumes returns the event types the durable consumer of s reads (nil when it has none).
func Consumes(s Service) []Type { r, _ := roleOf(s); return r.consumes }

// Permissions are the subjects a NATS user may publish to and subscribe to. Deny wins over
// Allow, as in nats-server.
type Permissions struct {
	PublishAllow   []string
	PublishDeny    []string
	SubscribeAllow []string
}

// PermissionsOf returns the NATS permissions of service s, derived from the event catalog.
//
// Problem: with an open bus, any client can publish "attachment.assigned" for any node or
// delete the stream, and every service trusts what it reads.
// Solution: each service may publish only the event types it produces, call only the
// JetStream API it uses (stream info and create of S3CSI_EVENTS, never update, and its own
// durable consumer), and subscribe only to the replies in its own inbox (_INBOX.<service>.>,
// see InboxPrefix) and the event types it consumes.
// Invariant: the chart's nats.conf is rendered from these lists (AuthorizationConf), and a
// test compares the two, so they cannot drift.
func PermissionsOf(s Service) (Permissions, error) {
	api := "$JS.API."
	switch s {
	case UserAudit, UserReplay:
		return readerPermissions(s), nil
	}
	r, ok := roleOf(s)
	if !ok {
		return Permissions{}, fmt.Errorf("look up permissions of service %q: unknown service", s)
	}
	p := Permissions{
		PublishAllow: append(NodeSubjects("", r.produces...),
			api+"STREAM.INFO."+StreamName,
			api+"STREAM.CREATE."+StreamName,
		),
		SubscribeAllow: []string{InboxPrefix(s) + ".>"},
	}
	if len(r.consumes) > 0 {
		c := StreamName + "." + r.durable
		p.PublishAllow = append(p.PublishAllow,
			api+"CONSUMER.CREATE."+c, api+"CONSUMER.CREATE."+c+".>",
			api+"CONSUMER.INFO."+c, api+"CONSUMER.MSG.NEXT."+c,
			"$JS.ACK."+c+".>",
		)
		p.SubscribeAllow = append(p.SubscribeAllow, NodeSubjects("", r.consumes...)...)
		if r.durable == "*" {
			// A wildcard durable must never reach another service's consumer.
			for _, other := range Services() {
				if o, _ := roleOf(other); o.durable != "" && o.durable != "*" {
					d := StreamName + "." + o.durable
					p.PublishDeny = append(p.PublishDeny, api+"CONSUMER.*."+d, api+"CONSUMER.*."+d+".>",
						api+"CONSUMER.MSG.NEXT."+d, "$JS.ACK."+d+".>")
				}
			}
		}
	}
	return p, nil
}

// readerPermissions are those of the users of kubectl s3csi.
//
// Problem: an audit user must read every event yet change nothing, and subject permissions
// cannot confine a user who may create JetStream consumers to its own (it could rewrite or
// delete a service's durable consumer).
// Solution: the users read with direct gets (ReadStream): stream info and DIRECT.GET of the
// events stream, and replies in an inbox of their own, _INBOX.<user>.> (the CLI connects with
// that inbox prefix), so they cannot read the services' replies either. The replay user may
// also publish under ReplaySubjectPrefix and create or inspect the stream that stores it.
// Invariant: neither user may publish on a live event subject, touch a consumer, or change,
// purge or delete the events stream.
func readerPermissions(s Service) Permissions {
	api := "$JS.API."
	p := Permissions{
		PublishAllow:   []string{api + "STREAM.INFO." + StreamName, api + "DIRECT.GET." + StreamName},
		SubscribeAllow: []string{InboxPrefix(s) + ".>"},
	}
	if s == UserReplay {
		p.PublishAllow = append(p.PublishAllow, ReplaySubjectPrefix+".>",
			api+"STREAM.INFO."+ReplayStreamName, api+"STREAM.CREATE."+ReplayStreamName)
	}
	return p
}

// InboxPrefix is the reply inbox prefix of user: the only inbox its permissions let it
// subscribe to, so no user reads the replies (JetStream API answers, pulled events) of another.
// Auth.Options connects with it.
func InboxPrefix(user Service) string { return "_INBOX." + string(user) }

// PasswordVariable is the nats.conf variable (resolved by nats-server from its environment)
// holding the password of service s, e.g. S3CSI_NATS_PASSWORD_NODE_AGENT.
func PasswordVariable(s Service) string {
	return "S3CSI_NATS_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(string(s), "-", "_"))
}

// AuthorizationConf renders the nats.conf authorization block: one user per service (and per
// user of kubectl s3csi, Users), named after it, with the password taken from the server's environment (PasswordVariable) and the
// permissions of PermissionsOf. It holds no secret, so it can be generated into the chart.
func AuthorizationConf() string {
	var b strings.Builder
	b.WriteString("# Generated from shared/events (PermissionsOf) by `make generate`; do not edit.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, s := range Users() {
		p, _ := PermissionsOf(s)
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: $%s\n      permissions: {\n", s, PasswordVariable(s))
		fmt.Fprintf(&b, "        publish: {\n          allow: %s\n", confList(p.PublishAllow, 10))
		if len(p.PublishDeny) > 0 {
			fmt.Fprintf(&b, "          deny: %s\n", confList(p.PublishDeny, 10))
		}
		fmt.Fprintf(&b, "        }\n        subscribe: {\n          allow: %s\n        }\n      }\n    }\n",
			confList(p.SubscribeAllow, 10))
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// confList renders subjects as a quoted nats.conf list, one per line, sorted for stable output.
func confList(subjects []string, indent int) string {
	s := append([]string(nil), subjects...)
	sort.Strings(s)
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	b.WriteString("[\n")
	for _, v := range s {
		fmt.Fprintf(&b, "%s  %q\n", pad, v)
	}
	b.WriteString(pad + "]")
	return b.String()
}
