// REQUIRES: clang, nvptx-registered-target
// RUN: split-file %s %t
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/gather.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC16
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/gather.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=HWD
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/fp8.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC8
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/fp8bf16.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC16
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/fp8bf16.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=HWQ
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/h46.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC4 --implicit-check-not=st.global.v

// The emitted CUDA source compiles warning-free to PTX for sm_90 (clang's
// CUDA device-only mode, as NVRTC would), and the chosen width reaches the
// stores (cache-streaming, st.global.cs, as planned for sm_90):
// 16 bytes for the dequantizing gather of 8 bf16,
// 8-byte stores (v2.u32) for the fp8 cache fed f32 (16-byte ones
// when fed bf16), and for head size 46 no vector
// store, only 4-byte pairs and the 2-byte fallback.
// (The raw 16-byte bf16 copy is covered by isa-sm90-raw-copy.mlir.)

// VEC16: .target sm_90
// VEC16: .entry {{mimo_read_fp8|mimo_write_fp8_bf16}}(
// VEC16: st.global.cs.v4.u32

// VEC8: .entry mimo_write_fp8(
// VEC8: ld.global.v4.b32
// VEC8: st.global.cs.v2.u32
// VEC8-NOT: st.global.v4

// Quantizing fp8 writes on sm_89+ (core.h HwQuantize): the hardware
// convert, whole 16-byte stores, and the exact path (non-finite values,
// non-positive scales) as an out-of-line function called from the kernel.
// HWQ: .func {{.*}}HwQuantize{{.*}}exact
// HWQ: .entry mimo_write_fp8_bf16(
// HWQ: cvt.rn.satfinite.e4m3x2.f32
// HWQ: st.global.cs.v4.u32
// HWQ: call.uni {{.*}}HwQuantize{{.*}}exact

// Dequantizing fp8 reads on sm_89+ (core.h HwDequantize): fp8 pairs to
// f16x2, floats to bf16x2, and the portable path out of line.
// HWD: .func {{.*}}HwDequantize{{.*}}exact
// HWD: .entry mimo_read_fp8(
// HWD: cvt.rn.f16x2.e4m3x2
// HWD: cvt.rn.bf16x2.f32
// HWD: call.uni {{.*}}HwDequantize{{.*}}exact

// VEC4: .entry h46_write(
// VEC4-DAG: st.global.cs.u32
// VEC4-DAG: st.global.b16

//--- gather.mlir
kv.gather @mimo_read_fp8 : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 64, dtype = f8E4M3FN, scale = per_tensor>,
    output bf16, slots i64 dequantize

//--- fp8.mlir
kv.reshape_and_cache @mimo_write_fp8 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, input f32, slots i64

//--- h46.mlir
kv.reshape_and_cache @h46_write : #kv.layout<num_kv_heads = 8,
    head_size_k = 46, head_size_v = 46, block_size = 16, dtype = bf16>,
    input bf16, slots i64

//--- fp8bf16.mlir
kv.reshape_and_cache @mimo_write_fp8_bf16 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, input bf16, slots i64
