package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3csi/cli/internal/audit"
)

// Print writes nodes as a table (one row per workload of each Mountpoint Pod), JSON or YAML.
func Print(w io.Writer, format string, nodes []Node) error {
	switch format {
	case audit.OutputJSON:
		b, err := json.MarshalIndent(map[string]any{"nodes": nodes}, "", "  ")
		if err != nil {
			return fmt.Errorf("encode status: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case audit.OutputYAML:
		b, err := yaml.Marshal(map[string]any{"nodes": nodes})
		if err != nil {
			return fmt.Errorf("encode status: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(w, "No Mountpoint Pod and no MountpointS3PodAttachment.")
		return err
	}
	t := audit.NewTable(w, "NODE", "PV", "S3PA", "MOUNTPOINT POD", "MOUNTPOINT", "WORKLOAD", "WORKLOAD PHASE", "HEALTH")
	for _, n := range nodes {
		for _, m := range n.Mountpoints {
			state := mountpointState(m)
			if len(m.Workloads) == 0 {
				t.Row(n.Name, dash(m.PV), dash(m.Attachment), m.Pod, state, "-", "-", m.Health)
				continue
			}
			for _, wl := range m.Workloads {
				name := wl.UID
				if wl.Name != "" {
					name = wl.Namespace + "/" + wl.Name
				}
				t.Row(n.Name, dash(m.PV), dash(m.Attachment), m.Pod, state, name, dash(wl.Phase), wl.Health)
			}
		}
	}
	return t.Flush()
}

// mountpointState is a Mountpoint Pod's phase, readiness, restarts and problem in one cell.
func mountpointState(m Mountpoint) string {
	if m.Phase == "" {
		return "missing"
	}
	parts := []string{m.Phase}
	if m.Ready {
		parts = append(parts, "ready")
	} else {
		parts = append(parts, "not-ready")
	}
	parts = append(parts, fmt.Sprintf("restarts=%d", m.Restarts))
	if m.Problem != "" {
		parts = append(parts, m.Problem)
	}
	if m.NeedsUnmount {
		parts = append(parts, "needs-unmount")
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
