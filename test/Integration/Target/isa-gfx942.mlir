// REQUIRES: clang, amdgpu-registered-target
// RUN: split-file %s %t
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/mimo.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC16
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/fp8.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC8
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/fp8bf16.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC16
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/gather.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC16
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/h46.mlir | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=VEC4 --implicit-check-not=global_store_dwordx

// The emitted HIP compiles warning-free for gfx942, and the width the plan
// chose reaches the ISA: 16-byte stores (global_store_dwordx4) when every
// row start is 16-byte aligned, 8-byte ones for an fp8 cache fed f32 (8 elements:
// 32 input bytes, 8 cache bytes; fed bf16 it takes 16 elements and 16-byte
// stores), and
// no wide store at all for head size 46 (rows of 92 bytes), only 4-byte
// pairs and the 2-byte element fallback.

// VEC16: .amdgcn_target "amdgcn-amd-amdhsa--gfx942
// VEC16: global_store_dwordx4
// VEC16: .end_amdhsa_kernel

// VEC8: global_store_dwordx2
// VEC8-NOT: global_store_dwordx4
// VEC8: .end_amdhsa_kernel

// VEC4-DAG: global_store_dword{{[[:space:]]}}
// VEC4-DAG: global_store_short
// VEC4: .end_amdhsa_kernel

//--- mimo.mlir
kv.reshape_and_cache @mimo_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

//--- fp8.mlir
kv.reshape_and_cache @mimo_write_fp8 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, input f32, slots i64

//--- gather.mlir
kv.gather @mimo_read_fp8 : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 64, dtype = f8E4M3FN, scale = per_tensor>,
    output bf16, slots i64 dequantize

//--- h46.mlir
kv.reshape_and_cache @h46_write : #kv.layout<num_kv_heads = 8,
    head_size_k = 46, head_size_v = 46, block_size = 16, dtype = bf16>,
    input bf16, slots i64

//--- fp8bf16.mlir
kv.reshape_and_cache @mimo_write_fp8_bf16 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, input bf16, slots i64
