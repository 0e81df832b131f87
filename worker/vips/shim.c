#include "shim.h"

// verbose_log decides whether libvips's own messages reach stderr: the
// worker's log is JSON, and libtiff warnings about unknown tags in real
// scans would otherwise drown it.
static int verbose_log = 0;

static void log_handler(const gchar *domain, GLogLevelFlags level,
                        const gchar *message, gpointer user_data) {
  if (verbose_log || (level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL))) {
    g_log_default_handler(domain, level, message, user_data);
  }
}

int shim_init(int concurrency, int verbose) {
  verbose_log = verbose;
  g_log_set_handler("VIPS", G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION,
                    log_handler, NULL);
  if (VIPS_INIT("worker")) {
    return 1;
  }
  if (concurrency > 0) {
    vips_concurrency_set(concurrency);
  }
  // Every run processes one file once: cached operations would only hold
  // memory.
  vips_cache_set_max(0);
  // Inputs are untrusted uploads: refuse loaders libvips marks as unsafe
  // for them (ImageMagick, MATLAB, ...).
  vips_block_untrusted_set(TRUE);
  return 0;
}

VipsImage *shim_open(const char *name) {
  return vips_image_new_from_file(name, NULL);
}

const char *shim_loader(const char *filename) {
  const char *name = vips_foreign_find_load(filename);
  if (!name) {
    return NULL;
  }
  // A class name such as "VipsForeignLoadTiffFile"; callers want the
  // operation's nickname, "tiffload".
  return vips_nickname_find(g_type_from_name(name));
}

int shim_thumbnail_file(const char *name, VipsImage **out, int size) {
  return vips_thumbnail(name, out, size, "height", size, "size", VIPS_SIZE_DOWN, NULL);
}

int shim_thumbnail_image(VipsImage *in, VipsImage **out, int size) {
  return vips_thumbnail_image(in, out, size, "height", size, "size", VIPS_SIZE_DOWN, NULL);
}

int shim_colourspace(VipsImage *in, VipsImage **out, VipsInterpretation space) {
  return vips_colourspace(in, out, space, NULL);
}

int shim_cast(VipsImage *in, VipsImage **out, VipsBandFormat format) {
  return vips_cast(in, out, format, NULL);
}

int shim_rshift(VipsImage *in, VipsImage **out, int bits) {
  return vips_rshift_const1(in, out, bits, NULL);
}

int shim_flatten_white(VipsImage *in, VipsImage **out) {
  double white[] = {255.0};
  VipsArrayDouble *background = vips_array_double_new(white, 1);
  int code = vips_flatten(in, out, "background", background, NULL);
  vips_area_unref(VIPS_AREA(background));
  return code;
}

int shim_extract_bands(VipsImage *in, VipsImage **out, int first, int n) {
  return vips_extract_band(in, out, first, "n", n, NULL);
}

int shim_copy_interpretation(VipsImage *in, VipsImage **out, VipsInterpretation space) {
  return vips_copy(in, out, "interpretation", space, NULL);
}

int shim_copy_set_int(VipsImage *in, VipsImage **out, const char *name, int value) {
  if (vips_copy(in, out, NULL)) {
    return 1;
  }
  vips_image_set_int(*out, name, value);
  return 0;
}

int shim_copy_remove(VipsImage *in, VipsImage **out, const char *name) {
  if (vips_copy(in, out, NULL)) {
    return 1;
  }
  vips_image_remove(*out, name);
  return 0;
}

int shim_jpegsave(VipsImage *in, void **buf, size_t *len, int quality) {
  return vips_jpegsave_buffer(in, buf, len, "Q", quality, NULL);
}

int shim_save_buffer(VipsImage *in, const char *suffix, void **buf, size_t *len) {
  return vips_image_write_to_buffer(in, suffix, buf, len, NULL);
}

VipsImage *shim_from_memory(const void *data, size_t size, int width, int height,
                            int bands, VipsBandFormat format) {
  return vips_image_new_from_memory_copy(data, size, width, height, bands, format);
}

int shim_getpoint(VipsImage *in, int x, int y, double *out, int max) {
  double *vector = NULL;
  int n = 0;
  if (vips_getpoint(in, &vector, &n, x, y, NULL)) {
    return -1;
  }
  if (n > max) {
    n = max;
  }
  for (int i = 0; i < n; i++) {
    out[i] = vector[i];
  }
  g_free(vector);
  return n;
}

#include <tiffio.h>

// MAX_RGBA_PIXELS bounds the fallback's raster (4 bytes a pixel in memory):
// libvips streams pages, this reader holds a whole page.
#define MAX_RGBA_PIXELS (256u * 1024u * 1024u)

int shim_tiff_rgba(const char *filename, int page, VipsImage **out, char *emsg) {
  emsg[0] = '\0';
  TIFF *tif = TIFFOpen(filename, "r");
  if (!tif) {
    snprintf(emsg, 1024, "libtiff cannot open the file");
    return 1;
  }
  int code = 1;
  uint32_t *raster = NULL;
  TIFFRGBAImage img;
  int begun = 0;

  if (!TIFFSetDirectory(tif, (tdir_t)page)) {
    snprintf(emsg, 1024, "libtiff cannot find page %d", page + 1);
    goto done;
  }
  if (!TIFFRGBAImageOK(tif, emsg) || !TIFFRGBAImageBegin(&img, tif, 1, emsg)) {
    goto done;
  }
  begun = 1;
  uint32_t w = img.width, h = img.height;
  if (w == 0 || h == 0 || (uint64_t)w * h > MAX_RGBA_PIXELS) {
    snprintf(emsg, 1024, "page of %ux%u pixels is too large for libtiff's RGBA reader", w, h);
    goto done;
  }
  raster = (uint32_t *)_TIFFmalloc((tmsize_t)w * h * sizeof(uint32_t));
  if (!raster) {
    snprintf(emsg, 1024, "out of memory for a %ux%u page", w, h);
    goto done;
  }
  img.req_orientation = ORIENTATION_TOPLEFT;
  if (!TIFFRGBAImageGet(&img, raster, w, h)) {
    // libtiff's reason is in libvips's error buffer (libvips routes
    // libtiff's errors there).
    goto done;
  }
  // Each pixel is a uint32 with R in the low byte: bytes R,G,B,A on a
  // little-endian machine. Make that order on any machine.
  for (uint64_t i = 0; i < (uint64_t)w * h; i++) {
    uint32_t v = raster[i];
    uint8_t *p = (uint8_t *)&raster[i];
    p[0] = TIFFGetR(v);
    p[1] = TIFFGetG(v);
    p[2] = TIFFGetB(v);
    p[3] = TIFFGetA(v);
  }
  VipsImage *rgba = vips_image_new_from_memory_copy(raster, (size_t)w * h * 4, w, h, 4, VIPS_FORMAT_UCHAR);
  if (!rgba) {
    goto done;
  }
  rgba->Type = VIPS_INTERPRETATION_sRGB;
  if (img.alpha) {
    *out = rgba;
  } else {
    // No alpha in the file: the reader filled A with 255; drop it.
    if (vips_extract_band(rgba, out, 0, "n", 3, NULL)) {
      g_object_unref(rgba);
      goto done;
    }
    g_object_unref(rgba);
  }
  code = 0;

done:
  if (begun) {
    TIFFRGBAImageEnd(&img);
  }
  if (raster) {
    _TIFFfree(raster);
  }
  TIFFClose(tif);
  return code;
}

int shim_allow_pdf(void) {
  // VipsForeignLoadPdf is the poppler loader's (abstract) base class:
  // unblocking it unblocks pdfload, pdfload_buffer and pdfload_source.
  // vips_operation_block_set takes a type name, not a nickname.
  const char *base = "VipsForeignLoadPdf";
  GType type = g_type_from_name(base);
  if (!type || !g_type_is_a(type, VIPS_TYPE_OPERATION)) {
    return 1;
  }
  vips_operation_block_set(base, FALSE);
  return 0;
}
