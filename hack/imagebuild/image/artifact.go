package image

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// emptyConfig is the OCI empty descriptor's content: the config of an artifact that has none.
var emptyConfig = []byte("{}")

// artifact is an OCI 1.1 artifact manifest: an empty config, one layer with a file, and a
// subject, the manifest it describes. Registries list it among the subject's referrers (the
// Referrers API, or go-containerregistry's tag fallback where the registry has none), which is
// where `oras discover`, `regctl artifact list` and scanners look for an image's SBOM.
type artifact struct {
	manifest []byte
	layer    v1.Layer
}

// newArtifact returns the artifact of artifactType whose one layer holds content (a file to be
// named title when pulled) and whose subject is the manifest subject.
func newArtifact(artifactType string, content []byte, title string, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	layer := static.NewLayer(content, types.MediaType(artifactType))
	layerDigest, err := layer.Digest()
	if err != nil {
		return nil, fmt.Errorf("digest artifact %s: %w", title, err)
	}
	configDigest, _, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, fmt.Errorf("digest artifact %s: %w", title, err)
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config: v1.Descriptor{
			MediaType: types.OCIEmptyJSON, Size: int64(len(emptyConfig)), Digest: configDigest, Data: emptyConfig,
		},
		Layers: []v1.Descriptor{{
			MediaType: types.MediaType(artifactType), Size: int64(len(content)), Digest: layerDigest,
			Annotations: map[string]string{"org.opencontainers.image.title": title},
		}},
		Subject:     &subject,
		Annotations: annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode artifact %s: %w", title, err)
	}
	img, err := partial.CompressedToImage(&artifact{manifest: raw, layer: layer})
	if err != nil {
		return nil, fmt.Errorf("assemble artifact %s: %w", title, err)
	}
	return img, nil
}

// RawConfigFile implements partial.CompressedImageCore.
func (a *artifact) RawConfigFile() ([]byte, error) { return emptyConfig, nil }

// MediaType implements partial.CompressedImageCore.
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// RawManifest implements partial.CompressedImageCore.
func (a *artifact) RawManifest() ([]byte, error) { return a.manifest, nil }

// LayerByDigest implements partial.CompressedImageCore: the one layer, or the empty config.
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.layer.Digest(); err == nil && d == h {
		return a.layer, nil
	}
	config := static.NewLayer(emptyConfig, types.OCIEmptyJSON)
	if d, err := config.Digest(); err == nil && d == h {
		return config, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}
