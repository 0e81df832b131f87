// Fixed-argument wrappers around the variadic libvips calls the worker needs:
// cgo cannot call variadic C functions. Every function that returns int
// returns 0 on success and non-zero on failure, with the reason in libvips's
// error buffer.
#ifndef WORKER_VIPS_SHIM_H
#define WORKER_VIPS_SHIM_H

#include <stdlib.h>
#include <vips/vips.h>

int shim_init(int concurrency, int verbose);

// shim_open opens a file lazily; name may end in a libvips option string,
// e.g. "in.tif[page=2,access=sequential]".
VipsImage *shim_open(const char *name);
const char *shim_loader(const char *filename);

int shim_thumbnail_file(const char *name, VipsImage **out, int size);
int shim_thumbnail_image(VipsImage *in, VipsImage **out, int size);
int shim_colourspace(VipsImage *in, VipsImage **out, VipsInterpretation space);
int shim_cast(VipsImage *in, VipsImage **out, VipsBandFormat format);
int shim_rshift(VipsImage *in, VipsImage **out, int bits);
int shim_flatten_white(VipsImage *in, VipsImage **out);
int shim_extract_bands(VipsImage *in, VipsImage **out, int first, int n);
int shim_copy_interpretation(VipsImage *in, VipsImage **out, VipsInterpretation space);
int shim_copy_set_int(VipsImage *in, VipsImage **out, const char *name, int value);
int shim_copy_remove(VipsImage *in, VipsImage **out, const char *name);
int shim_jpegsave(VipsImage *in, void **buf, size_t *len, int quality);
int shim_save_buffer(VipsImage *in, const char *suffix, void **buf, size_t *len);
VipsImage *shim_from_memory(const void *data, size_t size, int width, int height,
                            int bands, VipsBandFormat format);
// shim_tiff_rgba reads one directory (page) of a TIFF with libtiff's
// generic RGBA reader, the fallback for layouts libvips's TIFF loader does
// not support (subsampled YCbCr, old-style JPEG, odd bit depths). On failure
// it returns non-zero with the reason in emsg (at least 1024 bytes) or in
// libvips's error buffer.
int shim_tiff_rgba(const char *filename, int page, VipsImage **out, char *emsg);
// shim_allow_pdf lets the poppler PDF loader run although shim_init blocks
// untrusted loaders; it returns non-zero when libvips has no PDF loader.
int shim_allow_pdf(void);
int shim_getpoint(VipsImage *in, int x, int y, double *out, int max);

#endif
