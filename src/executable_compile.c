/* executable_compile: CUDA C++ source compiled at run time by NVRTC, which is loaded on
 * the first compile, its output kept in the device's disk cache (executable.h). */
#include "executable.h"
#include "hash.h"
#include "status.h"
#include "symbols.h"

#define GPUHAL__COMPILE_DEFAULT_NAME "gpuhal_program.cu"
/* Starts every key image, so a change of what the key holds changes every key. */
#define GPUHAL__COMPILE_KEY_MAGIC "gpuhal-nvrtc-key-1"
#define GPUHAL__COMPILE_SEED 0x67707568616C6e76ull /* "gpuhalnv" */
#define GPUHAL__COMPILE_MAX_ARCHS 128

/* The driver's NVRTC, loaded by its first compile. A failed load is tried again by the
 * next compile (the library may have been installed meanwhile). */
static gpuhal_status_t gpuhal__compile_nvrtc(gpuhal_driver_t* driver, const gpuhal__nvrtc_symbols_t** out) {
  gpuhal_status_t status = NULL;
  gpuhal__mutex_lock(&driver->nvrtc_mutex);
  if (!driver->nvrtc_loaded) {
    status = gpuhal__symbols_load_nvrtc(driver->nvrtc_option[0] ? driver->nvrtc_option : NULL, &driver->logger,
                                        &driver->nvrtc, &driver->nvrtc_handle, driver->nvrtc_library,
                                        sizeof(driver->nvrtc_library));
    driver->nvrtc_loaded = status == NULL;
  }
  gpuhal__mutex_unlock(&driver->nvrtc_mutex);
  *out = &driver->nvrtc;
  return status;
}

/* 1 when an option chooses the target itself. */
static int gpuhal__compile_option_names_arch(const char* option) {
  return strncmp(option, "-arch", 5) == 0 || strncmp(option, "--gpu-arch", 10) == 0;
}

/* "--gpu-architecture=compute_XY" for the device: its compute capability, or the newest NVRTC
 * supports below it (PTX runs on newer GPUs; the driver compiles it for them). */
static gpuhal_status_t gpuhal__compile_arch_option(const gpuhal__nvrtc_symbols_t* nvrtc, const gpuhal_device_t* device,
                                                   char* out, size_t out_size) {
  int want = device->info.compute_capability_major * 10 + device->info.compute_capability_minor;
  int chosen = want;
  int archs[GPUHAL__COMPILE_MAX_ARCHS];
  int count = 0, i;
  if (nvrtc->nvrtcGetNumSupportedArchs && nvrtc->nvrtcGetSupportedArchs &&
      nvrtc->nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0 && count <= GPUHAL__COMPILE_MAX_ARCHS &&
      nvrtc->nvrtcGetSupportedArchs(archs) == NVRTC_SUCCESS) {
    chosen = 0;
    for (i = 0; i < count; ++i)
      if (archs[i] <= want && archs[i] > chosen) chosen = archs[i];
    if (chosen == 0)
      return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                                "gpuhal_executable_compile: NVRTC %d.%d cannot compile for device %d (compute "
                                "capability %d.%d): its oldest target is compute_%d",
                                nvrtc->major, nvrtc->minor, device->ordinal, device->info.compute_capability_major,
                                device->info.compute_capability_minor, archs[0]);
  }
  snprintf(out, out_size, "--gpu-architecture=compute_%d", chosen);
  return NULL;
}

/* A string of the key image, with its NUL. */
static size_t gpuhal__compile_key_put(char* out, size_t at, const char* text) {
  size_t n = strlen(text) + 1;
  if (out) memcpy(out + at, text, n);
  return at + n;
}

/* The disk-cache key image of a compile: everything NVRTC's output depends on but its
 * version and the device (which the key holds apart). Measured with out == NULL. */
static size_t gpuhal__compile_key_image(const char* source, const char* name, const char* const* argv, uint32_t argc,
                                        const gpuhal_compile_options_t* o, char* out) {
  char count[32];
  size_t at = 0;
  uint32_t i;
  at = gpuhal__compile_key_put(out, at, GPUHAL__COMPILE_KEY_MAGIC);
  at = gpuhal__compile_key_put(out, at, name);
  snprintf(count, sizeof(count), "%u options", (unsigned)argc);
  at = gpuhal__compile_key_put(out, at, count);
  for (i = 0; i < argc; ++i) at = gpuhal__compile_key_put(out, at, argv[i]);
  snprintf(count, sizeof(count), "%u headers", (unsigned)o->header_count);
  at = gpuhal__compile_key_put(out, at, count);
  for (i = 0; i < o->header_count; ++i) {
    at = gpuhal__compile_key_put(out, at, o->header_names[i]);
    at = gpuhal__compile_key_put(out, at, o->header_sources[i]);
  }
  snprintf(count, sizeof(count), "%u names", (unsigned)o->name_expression_count);
  at = gpuhal__compile_key_put(out, at, count);
  for (i = 0; i < o->name_expression_count; ++i) at = gpuhal__compile_key_put(out, at, o->name_expressions[i]);
  return gpuhal__compile_key_put(out, at, source);
}

static void gpuhal__compile_disk_key(const gpuhal_device_t* device, const gpuhal__nvrtc_symbols_t* nvrtc,
                                     const char* image, size_t size, gpuhal__disk_key_t* key) {
  memset(key, 0, sizeof(*key));
  key->image_hash = gpuhal__hash_fast64(image, size, GPUHAL__COMPILE_SEED);
  key->image_size = size;
  key->image = image;
  key->image_format = GPUHAL__IMAGE_CUDA_SOURCE;
  key->cc_major = device->info.compute_capability_major;
  key->cc_minor = device->info.compute_capability_minor;
  key->driver_version = nvrtc->major * 1000 + nvrtc->minor * 10;
  key->compiler = GPUHAL__COMPILER_NVRTC;
}

/* NVRTC's log of `program` (NULL when empty or unreadable); the caller frees it. */
static char* gpuhal__compile_log(gpuhal_device_t* device, const gpuhal__nvrtc_symbols_t* nvrtc, nvrtcProgram program) {
  size_t size = 0;
  char* log = NULL;
  if (nvrtc->nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return NULL;
  if (gpuhal__alloc_zeroed(device->allocator, size + 1, "NVRTC log", (void**)&log)) return NULL;
  if (nvrtc->nvrtcGetProgramLog(program, log) != NVRTC_SUCCESS) {
    gpuhal__free(device->allocator, log);
    return NULL;
  }
  log[size] = '\0';
  return log;
}

/* 1 when `word` is spelled at `p`, perhaps split by line splices (backslash-newline). */
static int gpuhal__compile_word_at(const char* p, const char* word) {
  for (; *word; ++p, ++word) {
    while (p[0] == '\\' && (p[1] == '\n' || (p[1] == '\r' && p[2] == '\n'))) p += p[1] == '\n' ? 2 : 3;
    if (*p != *word) return 0;
  }
  return 1;
}

/* How often "include" occurs in [p, end) as plain text. */
static uint32_t gpuhal__compile_count_include(const char* p, const char* end) {
  uint32_t n = 0;
  for (; p + 7 <= end; ++p)
    if (strncmp(p, "include", 7) == 0) n++;
  return n;
}

/* 1 when `text` may make NVRTC read a file. Every #include (and __has_include) spells the
 * word "include", however it is written (comments around the '#', line splices, the %:
 * digraph, a macro for the name): each occurrence of the word must belong to a plain
 * directive, alone on its line, that names one of the program's headers. Anything else may
 * open a file (NVRTC opens a quoted name next to the program name, and any absolute path).
 * Read as text, not preprocessed: the word in a comment or a string counts too, which only
 * costs the disk cache. */
static int gpuhal__compile_text_reads_files(const char* text, const gpuhal_compile_options_t* o) {
  const char* p;
  uint32_t words = 0, matched = 0;
  for (p = text; *p; ++p)
    if (*p == 'i' && gpuhal__compile_word_at(p, "include")) words++;
  if (!words) return 0;
  for (p = text; *p;) {
    const char *name, *end;
    uint32_t i;
    while (*p == ' ' || *p == '\t' || *p == '\f' || *p == '\v') ++p;
    if (*p == '#') {
      for (++p; *p == ' ' || *p == '\t'; ++p) {
      }
      if (strncmp(p, "include", 7) == 0) {
        for (p += 7; *p == ' ' || *p == '\t'; ++p) {
        }
        if ((*p == '"' || *p == '<') && (end = strchr(p + 1, *p == '"' ? '"' : '>')) != NULL) {
          name = p + 1;
          for (i = 0; i < o->header_count; ++i)
            if (strlen(o->header_names[i]) == (size_t)(end - name) &&
                strncmp(o->header_names[i], name, (size_t)(end - name)) == 0)
              break;
          if (i < o->header_count) matched += 1 + gpuhal__compile_count_include(name, end);
        }
      }
    }
    p = strchr(p, '\n');
    if (!p) break;
    ++p;
  }
  return matched != words;
}

/* 1 when the program may read headers from disk: an option that names files or include
 * directories (-I, --include-path, -include, --pre-include), or an #include in the source
 * or its headers that is not one of its headers. Those bytes are not in the disk cache's
 * key, so such a program is not kept there (an edited header would load the old code). */
static int gpuhal__compile_reads_files(const char* source, const gpuhal_compile_options_t* o) {
  uint32_t i;
  for (i = 0; i < o->option_count; ++i) {
    const char* option = o->options[i];
    if (strncmp(option, "-I", 2) == 0 || strncmp(option, "--include-path", 14) == 0 ||
        strncmp(option, "-include", 8) == 0 || strncmp(option, "--pre-include", 13) == 0)
      return 1;
  }
  if (gpuhal__compile_text_reads_files(source, o)) return 1;
  for (i = 0; i < o->header_count; ++i)
    if (o->header_sources[i] && gpuhal__compile_text_reads_files(o->header_sources[i], o)) return 1;
  return 0;
}

/* 1 when the options name an sm_ target whose code runs on `device`: SASS runs on its own
 * major version, at its minor or a later one; an arch-specific target (sm_90a) on its exact
 * version only. */
static int gpuhal__compile_sm_target_runs_here(const gpuhal_device_t* device, const gpuhal_compile_options_t* o) {
  uint32_t i;
  for (i = 0; i < o->option_count; ++i) {
    const char* option = o->options[i];
    const char* value = strchr(option, '=');
    unsigned version = 0;
    int digits = 0, major, minor;
    if (!gpuhal__compile_option_names_arch(option)) continue;
    value = value ? value + 1 : (i + 1 < o->option_count ? o->options[i + 1] : "");
    if (strncmp(value, "sm_", 3) != 0) return 0;
    for (value += 3; *value >= '0' && *value <= '9' && digits < 4; ++value, ++digits)
      version = version * 10 + (unsigned)(*value - '0');
    if (digits < 2) return 0;
    major = (int)(version / 10);
    minor = (int)(version % 10);
    if (major != device->info.compute_capability_major) return 0;
    return *value ? minor == device->info.compute_capability_minor : minor <= device->info.compute_capability_minor;
  }
  return 0;
}

/* NVRTC's output for a compiled program: for an sm_ target whose code runs on the device,
 * the cubin (NVRTC makes PTX too, but the cubin is what was asked for: SASS options such as
 * -maxrregcount apply to it only, and it loads with no JIT); else the PTX, which the driver
 * compiles for the device (an sm_80 program on an sm_90 GPU). */
static gpuhal_status_t gpuhal__compile_output(gpuhal_device_t* device, const gpuhal__nvrtc_symbols_t* nvrtc,
                                              nvrtcProgram program, const gpuhal_compile_options_t* o, void** out,
                                              size_t* out_size) {
  size_t size = 0;
  int ptx = !(gpuhal__compile_sm_target_runs_here(device, o) && nvrtc->nvrtcGetCUBINSize && nvrtc->nvrtcGetCUBIN &&
              nvrtc->nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS && size > 0);
  gpuhal_status_t status;
  if (ptx) {
    size = 0;
    GPUHAL__RETURN_IF_ERROR(GPUHAL__NVRTC(nvrtc, nvrtcGetPTXSize, (program, &size)));
    if (size <= 1)
      return gpuhal_status_make(GPUHAL_STATUS_INTERNAL,
                                "gpuhal_executable_compile: NVRTC %d.%d made neither PTX nor a cubin", nvrtc->major,
                                nvrtc->minor);
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, size, "NVRTC output", out));
  status = ptx ? GPUHAL__NVRTC(nvrtc, nvrtcGetPTX, (program, (char*)*out))
               : GPUHAL__NVRTC(nvrtc, nvrtcGetCUBIN, (program, (char*)*out));
  if (status) {
    gpuhal__free(device->allocator, *out);
    *out = NULL;
    return status;
  }
  *out_size = size;
  return NULL;
}

/* ---- name expressions ----
 * A C++ kernel's entry name is mangled. For each name expression NVRTC gives the entry
 * ("scale<float>" -> "_Z5scaleIfEvPT_S0_j"); the executable keeps the pairs
 * (gpuhal_executable_s.names) so gpuhal_executable_kernel takes the expression. PTX output
 * carries them as comments, so a disk-cache hit, which runs no NVRTC, finds them too. */
#define GPUHAL__COMPILE_NAME_NOTE "// gpuhal-name "

/* 1 when NVRTC's output is PTX (not a cubin). */
static int gpuhal__compile_is_ptx(const void* output, size_t size) {
  gpuhal__image_format_t format = GPUHAL__IMAGE_CUBIN;
  size_t text = 0;
  gpuhal_status_t st = gpuhal__image_detect(output, size, "gpuhal_executable_compile", &format, &text);
  gpuhal_status_free(st);
  return !st && format == GPUHAL__IMAGE_PTX;
}

/* Appends "expression\0entry\0" to the block *names (*used bytes so far, *capacity
 * allocated), which stays ended by an empty string. */
static gpuhal_status_t gpuhal__compile_names_add(gpuhal_device_t* device, char** names, size_t* used, size_t* capacity,
                                                 const char* expression, size_t expression_size, const char* entry,
                                                 size_t entry_size) {
  char* at;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(device->allocator, (void**)names, capacity,
                                       *used + expression_size + entry_size + 3, 1, "name expressions"));
  at = *names + *used;
  memcpy(at, expression, expression_size);
  at[expression_size] = 0;
  memcpy(at + expression_size + 1, entry, entry_size);
  at[expression_size + 1 + entry_size] = 0;
  at[expression_size + entry_size + 2] = 0;
  *used += expression_size + entry_size + 2;
  return NULL;
}

/* The pairs of a compiled program's name expressions (NULL when it has none). */
static gpuhal_status_t gpuhal__compile_lowered_names(gpuhal_device_t* device, const gpuhal__nvrtc_symbols_t* nvrtc,
                                                     nvrtcProgram program, const gpuhal_compile_options_t* o,
                                                     char** out) {
  size_t used = 0, capacity = 0;
  uint32_t i;
  *out = NULL;
  for (i = 0; i < o->name_expression_count; ++i) {
    const char* entry = NULL;
    gpuhal_status_t st = GPUHAL__NVRTC(nvrtc, nvrtcGetLoweredName, (program, o->name_expressions[i], &entry));
    if (!st && !entry) st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "NVRTC gave no lowered name");
    if (!st)
      st = gpuhal__compile_names_add(device, out, &used, &capacity, o->name_expressions[i],
                                     strlen(o->name_expressions[i]), entry, strlen(entry));
    if (st) {
      gpuhal__free(device->allocator, *out);
      *out = NULL;
      return gpuhal_status_annotate(st, "gpuhal_executable_compile: argument 'options->name_expressions[%u]' ('%s')",
                                    (unsigned)i, o->name_expressions[i]);
    }
  }
  return NULL;
}

/* The pairs written into PTX as comments, read back (NULL when there are none). */
static gpuhal_status_t gpuhal__compile_names_from_ptx(gpuhal_device_t* device, const char* ptx, size_t size,
                                                      char** out) {
  size_t note = strlen(GPUHAL__COMPILE_NAME_NOTE), used = 0, capacity = 0, at = 0;
  *out = NULL;
  while (at < size) {
    const char* line = ptx + at;
    const char* end = (const char*)memchr(line, '\n', size - at);
    size_t length = end ? (size_t)(end - line) : size - at;
    const char* tab = (const char*)memchr(line, '\t', length);
    if (length > note && memcmp(line, GPUHAL__COMPILE_NAME_NOTE, note) == 0 && tab)
      GPUHAL__RETURN_IF_ERROR(gpuhal__compile_names_add(device, out, &used, &capacity, line + note,
                                                        (size_t)(tab - line) - note, tab + 1,
                                                        length - (size_t)(tab + 1 - line)));
    at += length + 1;
  }
  return NULL;
}

/* PTX `*ptx` (*size bytes with its NUL) with a comment line per pair of `names` added. */
static gpuhal_status_t gpuhal__compile_note_names(gpuhal_device_t* device, const char* names, void** ptx,
                                                  size_t* size) {
  size_t text = *size && ((char*)*ptx)[*size - 1] == 0 ? *size - 1 : *size, extra = 0, at;
  const char* p;
  char* grown = NULL;
  for (p = names; *p; p += strlen(p) + 1) extra += strlen(GPUHAL__COMPILE_NAME_NOTE) + strlen(p) + 1;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, text + extra + 2, "NVRTC output", (void**)&grown));
  memcpy(grown, *ptx, text);
  at = text;
  grown[at++] = '\n';
  for (p = names; *p;) {
    const char* entry = p + strlen(p) + 1;
    at += (size_t)sprintf(grown + at, "%s%s\t%s\n", GPUHAL__COMPILE_NAME_NOTE, p, entry);
    p = entry + strlen(entry) + 1;
  }
  gpuhal__free(device->allocator, *ptx);
  *ptx = grown;
  *size = at + 1; /* with the NUL */
  return NULL;
}

/* Runs NVRTC: *out is its output (the caller frees it), *out_is_ptx says whether it is PTX
 * (else a cubin). A compile error carries the log. */
static gpuhal_status_t gpuhal__compile_run(gpuhal_device_t* device, const gpuhal__nvrtc_symbols_t* nvrtc,
                                           const char* source, const char* name, const char* const* argv, uint32_t argc,
                                           const gpuhal_compile_options_t* o, void** out, size_t* out_size,
                                           char** out_names, int* out_is_ptx) {
  nvrtcProgram program = NULL;
  gpuhal_status_t status = NULL;
  nvrtcResult result;
  char* log;
  uint32_t i;
  GPUHAL__RETURN_IF_ERROR(GPUHAL__NVRTC(
      nvrtc, nvrtcCreateProgram, (&program, source, name, (int)o->header_count, o->header_sources, o->header_names)));
  for (i = 0; i < o->name_expression_count && !status; ++i)
    status = GPUHAL__NVRTC(nvrtc, nvrtcAddNameExpression, (program, o->name_expressions[i]));
  if (status) {
    nvrtc->nvrtcDestroyProgram(&program);
    return status;
  }
  result = nvrtc->nvrtcCompileProgram(program, (int)argc, argv);
  log = gpuhal__compile_log(device, nvrtc, program);
  if (result == NVRTC_ERROR_COMPILATION) {
    status = gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_executable_compile: argument 'source' ('%s') does not compile with NVRTC "
                                "%d.%d:\n%s",
                                name, nvrtc->major, nvrtc->minor, log ? log : "(NVRTC gave no log)");
  } else if (result == NVRTC_ERROR_INVALID_OPTION) {
    status = gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_executable_compile: argument 'options->options' holds an option NVRTC %d.%d "
                                "refuses (NVRTC_ERROR_INVALID_OPTION)%s%s",
                                nvrtc->major, nvrtc->minor, log ? ": " : "", log ? log : "");
  } else {
    status = gpuhal__nvrtc_status(nvrtc, result, "nvrtcCompileProgram", __FILE__, __LINE__);
    if (!status && log)
      gpuhal__log(device->logger, GPUHAL_LOG_INFO, "gpuhal_executable_compile: '%s': NVRTC says:\n%s", name, log);
  }
  gpuhal__free(device->allocator, log);
  if (!status) status = gpuhal__compile_output(device, nvrtc, program, o, out, out_size);
  if (!status) status = gpuhal__compile_lowered_names(device, nvrtc, program, o, out_names);
  *out_is_ptx = !status && gpuhal__compile_is_ptx(*out, *out_size);
  if (!status && *out_names && *out_is_ptx) status = gpuhal__compile_note_names(device, *out_names, out, out_size);
  nvrtc->nvrtcDestroyProgram(&program);
  if (status) {
    gpuhal__free(device->allocator, *out);
    gpuhal__free(device->allocator, *out_names);
    *out = NULL;
    *out_names = NULL;
  }
  return status;
}

/* The disk cache's file for `key`: 1 and *out_file (to free) / *out_payload on a hit. */
static int gpuhal__compile_from_disk(gpuhal__module_cache_t* cache, const gpuhal__disk_key_t* key,
                                     const char* file_name, void** out_file, const void** out_payload,
                                     size_t* out_size) {
  char path[GPUHAL__PATH_MAX];
  gpuhal_status_t st;
  if (!gpuhal__disk_path(&cache->disk, file_name, path, sizeof(path))) return 0;
  st = gpuhal__disk_lookup(&cache->disk, key, path, out_file, out_payload, out_size);
  if (!st) return 1;
  if (gpuhal_status_code(st) != GPUHAL_STATUS_NOT_FOUND) {
    GPUHAL__STAT_ADD(&cache->stats, disk_rejects);
    gpuhal__log(cache->device->logger, GPUHAL_LOG_DEBUG, "gpuhal_executable_compile: ignoring disk cache file %s: %s",
                path, gpuhal_status_message(st));
  }
  gpuhal_status_free(st);
  return 0;
}

static gpuhal_status_t gpuhal__compile_check_options(const gpuhal_compile_options_t* o) {
  uint32_t i;
  GPUHAL__CHECK_ARG(o->option_count == 0 || o->options != NULL, "options->options",
                    "must not be NULL when options->option_count > 0");
  GPUHAL__CHECK_ARG(o->header_count == 0 || (o->header_names != NULL && o->header_sources != NULL),
                    "options->header_names", "and options->header_sources must not be NULL when header_count > 0");
  GPUHAL__CHECK_RANGE(o->option_count <= 4096, "options->option_count", "must be at most 4096");
  GPUHAL__CHECK_RANGE(o->header_count <= 4096, "options->header_count", "must be at most 4096");
  GPUHAL__CHECK_ARG(o->name_expression_count == 0 || o->name_expressions != NULL, "options->name_expressions",
                    "must not be NULL when options->name_expression_count > 0");
  GPUHAL__CHECK_RANGE(o->name_expression_count <= 4096, "options->name_expression_count", "must be at most 4096");
  for (i = 0; i < o->name_expression_count; ++i)
    if (!o->name_expressions[i] || !o->name_expressions[i][0] || strpbrk(o->name_expressions[i], "\t\r\n"))
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_executable_compile: argument 'options->name_expressions[%u]' must be a "
                                "non-empty expression on one line",
                                (unsigned)i);
  for (i = 0; i < o->option_count; ++i)
    if (!o->options[i])
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_executable_compile: argument 'options->options[%u]' must not be NULL",
                                (unsigned)i);
  for (i = 0; i < o->header_count; ++i)
    if (!o->header_names[i] || !o->header_sources[i])
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_executable_compile: argument 'options->header_%s[%u]' must not be NULL",
                                o->header_names[i] ? "sources" : "names", (unsigned)i);
  return NULL;
}

/* The options NVRTC gets: the user's, after the target gpuhal chose (unless one of them
 * names it). *out_argv is to free. */
static gpuhal_status_t gpuhal__compile_argv(gpuhal_device_t* device, const gpuhal__nvrtc_symbols_t* nvrtc,
                                            const gpuhal_compile_options_t* o, char* arch, size_t arch_size,
                                            const char*** out_argv, uint32_t* out_argc) {
  const char** argv = NULL;
  uint32_t i, argc = 0;
  int user_arch = 0;
  for (i = 0; i < o->option_count; ++i) user_arch |= gpuhal__compile_option_names_arch(o->options[i]);
  if (!user_arch) GPUHAL__RETURN_IF_ERROR(gpuhal__compile_arch_option(nvrtc, device, arch, arch_size));
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(char*) * ((size_t)o->option_count + 1),
                                               "NVRTC options", (void**)&argv));
  if (!user_arch) argv[argc++] = arch;
  for (i = 0; i < o->option_count; ++i) argv[argc++] = o->options[i];
  *out_argv = argv;
  *out_argc = argc;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_executable_compile(gpuhal_device_t* device, const char* source,
                                                     const gpuhal_compile_options_t* options,
                                                     gpuhal_executable_t** out_executable) {
  gpuhal_compile_options_t none;
  const gpuhal__nvrtc_symbols_t* nvrtc = NULL;
  gpuhal__module_cache_t* cache;
  gpuhal__disk_key_t key;
  const char** argv = NULL;
  uint32_t argc = 0;
  char arch[64];
  char file_name[256];
  const char* name;
  char* image = NULL;
  size_t image_size = 0;
  void* output = NULL;
  void* file = NULL;
  const void* payload = NULL;
  size_t payload_size = 0;
  char* names = NULL;
  int disk;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_executable != NULL, "out_executable", "must not be NULL");
  *out_executable = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(source != NULL, "source", "must not be NULL");
  if (!options) {
    memset(&none, 0, sizeof(none));
    options = &none;
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__compile_check_options(options));
  memset(&key, 0, sizeof(key));
  file_name[0] = '\0';
  name = options->program_name ? options->program_name : GPUHAL__COMPILE_DEFAULT_NAME;
  status = gpuhal__compile_nvrtc(device->driver, &nvrtc);
  if (status) return gpuhal_status_annotate(status, "gpuhal_executable_compile");
  GPUHAL__RETURN_IF_ERROR(gpuhal__compile_argv(device, nvrtc, options, arch, sizeof(arch), &argv, &argc));
  cache = gpuhal__module_cache_of(device);
  disk = gpuhal__atomic_load(&cache->disk.enabled) && !gpuhal__compile_reads_files(source, options);
  if (disk) {
    image_size = gpuhal__compile_key_image(source, name, argv, argc, options, NULL);
    status = gpuhal__alloc_zeroed(device->allocator, image_size, "compile cache key", (void**)&image);
    if (status) {
      gpuhal__free(device->allocator, argv);
      return status;
    }
    gpuhal__compile_key_image(source, name, argv, argc, options, image);
    gpuhal__compile_disk_key(device, nvrtc, image, image_size, &key);
    gpuhal__disk_file_name(&key, file_name, sizeof(file_name));
    if (gpuhal__compile_from_disk(cache, &key, file_name, &file, &payload, &payload_size)) {
      GPUHAL__STAT_ADD(&cache->stats, source_disk_hits);
      if (options->name_expression_count)
        status = gpuhal__compile_names_from_ptx(device, (const char*)payload, payload_size, &names);
    }
  }
  if (!payload) {
    int is_ptx = 0;
    GPUHAL__STAT_ADD(&cache->stats, source_compiles);
    status =
        gpuhal__compile_run(device, nvrtc, source, name, argv, argc, options, &output, &payload_size, &names, &is_ptx);
    payload = output;
    /* A cubin cannot carry the name expressions' entries: such a program is not kept. */
    if (!status && disk && (!names || is_ptx)) gpuhal__disk_store(&cache->disk, &key, file_name, output, payload_size);
  }
  gpuhal__free(device->allocator, argv);
  if (!status) {
    status = gpuhal_executable_load(device, payload, payload_size, out_executable);
    if (status)
      status = gpuhal_status_annotate(status, "gpuhal_executable_compile: loading what NVRTC made of '%s'", name);
  }
  if (!status) {
    (*out_executable)->names = names;
    names = NULL;
  }
  gpuhal__free(device->allocator, names);
  gpuhal__free(device->allocator, output);
  gpuhal__free(device->allocator, file);
  gpuhal__free(device->allocator, image);
  return status;
}
