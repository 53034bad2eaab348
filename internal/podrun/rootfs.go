package podrun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// A container's file system is this machine's, seen from a root of its own
// in a private mount namespace, so that a volume appears at its mountPath
// (and the termination log at terminationMessagePath) without creating
// anything in the machine's own folders:
//
//   - the root is a tmpfs holding one bind mount (recursive) per entry of
//     the machine's "/", symbolic links recreated as they are;
//   - /dev is a tmpfs of its own with the usual device nodes (null, zero,
//     full, random, urandom, tty), pts, a fresh shm, and the fd/stdin/
//     stdout/stderr links, as a container runtime sets it up, plus the
//     claims' block devices and the termination log;
//   - a mount point that does not exist is created in a tmpfs: where its
//     parent folder is the machine's, that folder is first "shadowed" by a
//     tmpfs holding bind mounts of its entries, so the machine's folder is
//     never written.
//
// rootPlan computes the steps; setupScript carries them out inside
// `unshare --mount --propagation private` and then chroots into the root.
// Nothing in the namespace outlives the container's process.

// mountOp is one step of a plan: op is tmpfs, mkdir, file, symlink, bind or
// ro (remount read-only); src is the machine's path (bind) or the link's
// target (symlink); dst is a path on the machine, under the new root.
type mountOp struct{ op, src, dst string }

// dirKind says what a folder of the new root holds.
type dirKind int

const (
	// hostDir is a bind mount of the machine's folder at the same path.
	hostDir dirKind = iota
	// shadowDir is a tmpfs with bind mounts of the machine's folder's
	// entries, and entries the plan created.
	shadowDir
	// ownDir is a folder the plan created (in a tmpfs): only created
	// entries.
	ownDir
)

// rootPlan builds a container's root under root (a folder on the
// machine).
type rootPlan struct {
	root    string
	ops     []mountOp
	kinds   map[string]dirKind // container folder -> kind, once known
	created map[string]bool    // container paths the plan created
	// hostRoot is the machine's root as the plan reads it (a test may
	// point it elsewhere); "/" normally.
	hostRoot string
}

// standardDevices are the device nodes every container's /dev has (the
// OCI runtime spec's default devices, config-linux.md).
var standardDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

func newRootPlan(root string) (*rootPlan, error) {
	p := &rootPlan{root: root, kinds: map[string]dirKind{}, created: map[string]bool{}, hostRoot: "/"}
	p.add("tmpfs", "", "/")
	p.kinds["/"] = shadowDir
	if err := p.mirror("/", "dev", "proc"); err != nil {
		return nil, err
	}
	// /proc: the machine's (no PID namespace, so its view is the same).
	p.add("mkdir", "", "/proc")
	p.add("bind", "/proc", "/proc")
	p.created["/proc"] = true
	p.kinds["/proc"] = hostDir

	p.add("mkdir", "", "/dev")
	p.add("tmpfs", "", "/dev")
	p.created["/dev"] = true
	p.kinds["/dev"] = ownDir
	for _, d := range standardDevices {
		if err := p.ensureFile("/dev/"+d, "/dev/"+d); err != nil {
			return nil, err
		}
	}
	p.add("mkdir", "", "/dev/pts")
	p.add("bind", "/dev/pts", "/dev/pts")
	p.add("mkdir", "", "/dev/shm")
	p.add("tmpfs", "", "/dev/shm")
	for _, l := range []struct{ name, target string }{
		{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
		{"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"},
	} {
		p.add("symlink", l.target, "/dev/"+l.name)
	}
	for _, n := range []string{"pts", "shm", "fd", "stdin", "stdout", "stderr", "ptmx"} {
		p.created["/dev/"+n] = true
	}
	p.kinds["/dev/pts"], p.kinds["/dev/shm"] = hostDir, ownDir
	return p, nil
}

func (p *rootPlan) add(op, src, dst string) {
	p.ops = append(p.ops, mountOp{op: op, src: src, dst: filepath.Join(p.root, dst)})
}

func (p *rootPlan) host(cpath string) string { return filepath.Join(p.hostRoot, cpath) }

// mirror fills container folder dir (a fresh tmpfs) with the machine's
// entries of the same folder, except those named in skip.
func (p *rootPlan) mirror(dir string, skip ...string) error {
	entries, err := os.ReadDir(p.host(dir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if contains(skip, e.Name()) {
			continue
		}
		c := path.Join(dir, e.Name())
		h := p.host(c)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(h)
			if err != nil {
				return err
			}
			p.add("symlink", target, c)
		case e.IsDir():
			p.add("mkdir", "", c)
			p.add("bind", h, c)
		default:
			p.add("file", "", c)
			p.add("bind", h, c)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// errSymlink carries a path rewritten through a symbolic link.
type errSymlink struct{ path string }

func (e errSymlink) Error() string { return "symbolic link to " + e.path }

// ensureDir makes folder cpath exist in the container and returns the
// path it resolves to (after symbolic links).
func (p *rootPlan) ensureDir(cpath string) (string, error) { return p.ensure(cpath, true) }

// ensureFile makes file cpath exist in the container (a placeholder where
// it does not) and bind-mounts src over it.
func (p *rootPlan) ensureFile(cpath, src string) error {
	resolved, err := p.ensure(cpath, false)
	if err != nil {
		return err
	}
	p.addBind(src, resolved)
	return nil
}

func (p *rootPlan) addBind(src, cpath string) {
	p.ops = append(p.ops, mountOp{op: "bind", src: src, dst: filepath.Join(p.root, cpath)})
}

func (p *rootPlan) readOnly(cpath string) {
	p.ops = append(p.ops, mountOp{op: "ro", dst: filepath.Join(p.root, cpath)})
}

// ensure walks cpath from the root, following symbolic links the way the
// container will, shadowing a machine folder where an entry must be
// created in it, and creating what is missing (the last element a folder
// when dir, else a file).
func (p *rootPlan) ensure(cpath string, dir bool) (string, error) {
	if !path.IsAbs(cpath) {
		return "", fmt.Errorf("%q is not an absolute path", cpath)
	}
	for range 40 {
		resolved, err := p.walk(path.Clean(cpath), dir)
		var sl errSymlink
		if errors.As(err, &sl) {
			cpath = sl.path
			continue
		}
		return resolved, err
	}
	return "", fmt.Errorf("%q: too many levels of symbolic links", cpath)
}

func (p *rootPlan) walk(cpath string, dir bool) (string, error) {
	if cpath == "/" {
		return "/", nil
	}
	parts := strings.Split(strings.TrimPrefix(cpath, "/"), "/")
	cur := "/"
	for i, name := range parts {
		next := path.Join(cur, name)
		last := i == len(parts)-1
		kind := p.kinds[cur]
		if p.created[next] {
			cur = next
			continue
		}
		if kind != ownDir {
			st, err := os.Lstat(p.host(next))
			switch {
			case err == nil && st.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p.host(next))
				if err != nil {
					return "", err
				}
				if !path.IsAbs(target) {
					target = path.Join(cur, target)
				}
				return "", errSymlink{path: path.Join(append([]string{target}, parts[i+1:]...)...)}
			case err == nil:
				if !last && !st.IsDir() {
					return "", fmt.Errorf("%s: %s is not a folder", cpath, next)
				}
				if st.IsDir() {
					if _, ok := p.kinds[next]; !ok {
						p.kinds[next] = hostDir
					}
				}
				cur = next
				continue
			case !errors.Is(err, fs.ErrNotExist):
				return "", err
			}
			if kind == hostDir {
				// A machine folder: make it a tmpfs of its own first.
				p.add("tmpfs", "", cur)
				if err := p.mirror(cur); err != nil {
					return "", err
				}
				p.kinds[cur] = shadowDir
			}
		}
		if last && !dir {
			p.add("file", "", next)
		} else {
			p.add("mkdir", "", next)
			p.kinds[next] = ownDir
		}
		p.created[next] = true
		cur = next
	}
	return cur, nil
}

// setupScript is run by `unshare --mount --propagation private /bin/sh -c`
// with the plan's steps as arguments (op src dst, repeated), then "--",
// the root, the working folder, a file to create once the steps are done
// (on the machine: the runner waits for it before it reports the container
// running) and the container's command. A failing
// step exits 128, as a runtime's failure to start a container is
// reported (StartError).
const setupScript = `
fail() { echo "podrun: cannot set up the container: $*" >&2; exit 128; }
while [ "$1" != "--" ]; do
	op=$1 src=$2 dst=$3
	shift 3
	case $op in
	tmpfs) /usr/bin/mount -t tmpfs -o mode=755 tmpfs "$dst" || fail "tmpfs on $dst" ;;
	mkdir) /usr/bin/mkdir -p "$dst" || fail "mkdir $dst" ;;
	file) : >>"$dst" || fail "creating $dst" ;;
	symlink) /usr/bin/ln -sfn "$src" "$dst" || fail "symlink $dst" ;;
	bind) /usr/bin/mount --rbind "$src" "$dst" || fail "bind $src on $dst" ;;
	ro) /usr/bin/mount -o remount,bind,ro "$dst" || fail "read-only $dst" ;;
	*) fail "unknown step $op" ;;
	esac
done
shift
root=$1 dir=$2 ready=$3
shift 3
: >"$ready" || fail "marking the container started"
exec /usr/sbin/chroot "$root" /bin/sh -c 'cd "$0" || exit 128; exec "$@"' "$dir" "$@"
`

// args returns unshare's arguments that carry out the plan, create the
// file ready, and then run argv in folder workDir of the new root.
func (p *rootPlan) args(workDir, ready string, argv []string) []string {
	a := []string{"--mount", "--propagation", "private", "/bin/sh", "-c", setupScript, "podrun-setup"}
	for _, op := range p.ops {
		a = append(a, op.op, op.src, op.dst)
	}
	a = append(a, "--", p.root, workDir, ready)
	return append(a, argv...)
}

// sortedKeys returns m's keys in order, so that plans are deterministic.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
