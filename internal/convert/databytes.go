package convert

import (
	"os"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// DataBytes returns how many bytes of the file at path hold data, as its
// file system's holes tell. A file system that does not report holes makes
// every byte data.
func DataBytes(path string) (int64, error) {
	var data int64
	err := sparsefile.WalkFile(path, func(_ *os.File, _, n int64, isData bool) error {
		if isData {
			data += n
		}
		return nil
	})
	return data, err
}
