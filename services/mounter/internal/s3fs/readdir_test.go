package s3fs

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
)

func TestDirStreamMerging(t *testing.T) {
	type item struct {
		key string
		dir bool
	}
	tests := []struct {
		name  string
		items []item
		want  []string // name, with "/" for directories
	}{
		{
			name:  "a directory shadows a file of the same name even with keys sorting between them",
			items: []item{{"p/a", false}, {"p/a.txt", false}, {"p/a/", true}, {"p/b", false}},
			want:  []string{"a.txt", "a/", "b"},
		},
		{
			name:  "a file without a directory of its name is listed",
			items: []item{{"p/a", false}, {"p/b/", true}},
			want:  []string{"a", "b/"},
		},
		{
			name:  "a directory marker and names that cannot be file names are hidden",
			items: []item{{"p/", false}, {"p/../", true}, {"p/x", false}},
			want:  []string{"x"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &dirNode{fsys: &filesystem{meta: newMetaCache(time.Minute, 0)}, prefix: "p/", local: map[string]*fs.Inode{}}
			s := &dirStream{d: d}
			s.reset()
			s.started = true
			for _, it := range tc.items {
				if it.dir {
					s.addDir(it.key)
				} else {
					s.addFile(it.key, entry{})
				}
			}
			s.done = true
			var got []string
			for s.HasNext() {
				e, errno := s.Next()
				if errno != 0 {
					t.Fatal(errno)
				}
				suffix := ""
				if e.Mode == syscall.S_IFDIR {
					suffix = "/"
				}
				got = append(got, e.Name+suffix)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("entries = %q, want %q", got, tc.want)
			}
			if c, ok := d.fsys.meta.get("p/a"); ok && slices.Contains(tc.want, "a/") && !c.entry.isDir {
				t.Fatalf("cache says %q is a file, want the shadowing directory", "p/a")
			}
		})
	}
}
