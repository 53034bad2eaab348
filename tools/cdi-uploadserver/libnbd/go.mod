// Module libguestfs.org/libnbd stands in for the libnbd Go bindings, which the
// module proxy does not serve. CDI's importer package references them only on
// its VDDK path, which the upload server never takes; every call here fails.
module libguestfs.org/libnbd

go 1.24.0
