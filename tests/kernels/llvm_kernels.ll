; LLVM IR of the kind IREE, Triton, Julia and Numba hand to LLVM's NVPTX back end: kernels
; marked by !nvvm.annotations (launch bounds too), byval structs, mixed scalars, 60
; parameters, module globals, dynamic and static shared memory, device functions (.func),
; mangled and '$' names. regen_llvm.sh compiles it to llvm_kernels.ptx. Twins: llvm_kernels.c
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.S = type { i32, i64, float, i8 }

@table = addrspace(1) global [4 x i32] [i32 11, i32 22, i32 33, i32 44], align 4
@scale = addrspace(1) global i32 7, align 4
@coef = addrspace(4) constant [2 x float] [float 1.5, float 2.5], align 4
@dsmem = external addrspace(3) global [0 x i32], align 16
@tile = internal addrspace(3) global [4096 x i32] undef, align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare void @llvm.nvvm.barrier0()

define internal i32 @global_id() alwaysinline {
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %base = mul i32 %ctaid, %ntid
  %id = add i32 %base, %tid
  ret i32 %id
}

; A helper LLVM keeps as a .func; its '.' is not valid in PTX, so LLVM renames it.
define internal float @"scale.helper"(float %x, float %s) noinline {
  %r = fmul float %x, %s
  ret float %r
}

; out[i] = 2 * i + 1 for i < n. Launch bounds: at most 128 threads, 2 blocks per SM.
define void @llvm_maxntid(i32 addrspace(1)* %out, i32 %n) {
  %i = call i32 @global_id()
  %in = icmp ult i32 %i, %n
  br i1 %in, label %store, label %done
store:
  %twice = shl i32 %i, 1
  %v = add i32 %twice, 1
  %p = getelementptr i32, i32 addrspace(1)* %out, i32 %i
  store i32 %v, i32 addrspace(1)* %p
  br label %done
done:
  ret void
}

; out[i] = i + 1000 for i < n. Exactly 64 x 1 x 1 threads per block.
define void @llvm_reqntid(i32 addrspace(1)* %out, i32 %n) {
  %i = call i32 @global_id()
  %in = icmp ult i32 %i, %n
  br i1 %in, label %store, label %done
store:
  %v = add i32 %i, 1000
  %p = getelementptr i32, i32 addrspace(1)* %out, i32 %i
  store i32 %v, i32 addrspace(1)* %p
  br label %done
done:
  ret void
}

; Exactly 16 x 4 x 1 threads per block: out[block * 64 + y * 16 + x] = y * 100 + x.
define void @llvm_reqntid_2d(i32 addrspace(1)* %out) {
  %x = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %y = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %row = mul i32 %y, 16
  %in = add i32 %row, %x
  %base = mul i32 %b, 64
  %i = add i32 %base, %in
  %y100 = mul i32 %y, 100
  %v = add i32 %y100, %x
  %p = getelementptr i32, i32 addrspace(1)* %out, i32 %i
  store i32 %v, i32 addrspace(1)* %p
  ret void
}

; A byval struct (24 bytes, align 8: .param .align 8 .b8 p[24]) between scalars of every
; width. Thread 0 writes each value, widened, to out[0..9].
define void @llvm_byval(i64 addrspace(1)* %out, %struct.S* byval(%struct.S) align 8 %s, i32 %x, i64 %y, i16 %h,
                        i8 %c, double %d, float %f) {
  %pa = getelementptr %struct.S, %struct.S* %s, i32 0, i32 0
  %a = load i32, i32* %pa
  %pb = getelementptr %struct.S, %struct.S* %s, i32 0, i32 1
  %b = load i64, i64* %pb
  %pc = getelementptr %struct.S, %struct.S* %s, i32 0, i32 2
  %cf = load float, float* %pc
  %pd = getelementptr %struct.S, %struct.S* %s, i32 0, i32 3
  %dc = load i8, i8* %pd
  %a64 = sext i32 %a to i64
  %cbits = bitcast float %cf to i32
  %c64 = zext i32 %cbits to i64
  %d64 = zext i8 %dc to i64
  %x64 = sext i32 %x to i64
  %h64 = zext i16 %h to i64
  %cc64 = zext i8 %c to i64
  %dbits = bitcast double %d to i64
  %fbits = bitcast float %f to i32
  %f64 = zext i32 %fbits to i64
  %o1 = getelementptr i64, i64 addrspace(1)* %out, i32 1
  %o2 = getelementptr i64, i64 addrspace(1)* %out, i32 2
  %o3 = getelementptr i64, i64 addrspace(1)* %out, i32 3
  %o4 = getelementptr i64, i64 addrspace(1)* %out, i32 4
  %o5 = getelementptr i64, i64 addrspace(1)* %out, i32 5
  %o6 = getelementptr i64, i64 addrspace(1)* %out, i32 6
  %o7 = getelementptr i64, i64 addrspace(1)* %out, i32 7
  %o8 = getelementptr i64, i64 addrspace(1)* %out, i32 8
  %o9 = getelementptr i64, i64 addrspace(1)* %out, i32 9
  store i64 %a64, i64 addrspace(1)* %out
  store i64 %b, i64 addrspace(1)* %o1
  store i64 %c64, i64 addrspace(1)* %o2
  store i64 %d64, i64 addrspace(1)* %o3
  store i64 %x64, i64 addrspace(1)* %o4
  store i64 %y, i64 addrspace(1)* %o5
  store i64 %h64, i64 addrspace(1)* %o6
  store i64 %cc64, i64 addrspace(1)* %o7
  store i64 %dbits, i64 addrspace(1)* %o8
  store i64 %f64, i64 addrspace(1)* %o9
  ret void
}
; 60 parameters (out, then i32 / i64 alternately): out[k - 1] = parameter k, widened.
define void @llvm_many(i64 addrspace(1)* %out, i32 %p1, i64 %p2, i32 %p3, i64 %p4, i32 %p5, i64 %p6, i32 %p7, i64 %p8, i32 %p9, i64 %p10, i32 %p11, i64 %p12, i32 %p13, i64 %p14, i32 %p15, i64 %p16, i32 %p17, i64 %p18, i32 %p19, i64 %p20, i32 %p21, i64 %p22, i32 %p23, i64 %p24, i32 %p25, i64 %p26, i32 %p27, i64 %p28, i32 %p29, i64 %p30, i32 %p31, i64 %p32, i32 %p33, i64 %p34, i32 %p35, i64 %p36, i32 %p37, i64 %p38, i32 %p39, i64 %p40, i32 %p41, i64 %p42, i32 %p43, i64 %p44, i32 %p45, i64 %p46, i32 %p47, i64 %p48, i32 %p49, i64 %p50, i32 %p51, i64 %p52, i32 %p53, i64 %p54, i32 %p55, i64 %p56, i32 %p57, i64 %p58, i32 %p59) {
  %w1 = sext i32 %p1 to i64
  %o1 = getelementptr i64, i64 addrspace(1)* %out, i32 0
  store i64 %w1, i64 addrspace(1)* %o1
  %o2 = getelementptr i64, i64 addrspace(1)* %out, i32 1
  store i64 %p2, i64 addrspace(1)* %o2
  %w3 = sext i32 %p3 to i64
  %o3 = getelementptr i64, i64 addrspace(1)* %out, i32 2
  store i64 %w3, i64 addrspace(1)* %o3
  %o4 = getelementptr i64, i64 addrspace(1)* %out, i32 3
  store i64 %p4, i64 addrspace(1)* %o4
  %w5 = sext i32 %p5 to i64
  %o5 = getelementptr i64, i64 addrspace(1)* %out, i32 4
  store i64 %w5, i64 addrspace(1)* %o5
  %o6 = getelementptr i64, i64 addrspace(1)* %out, i32 5
  store i64 %p6, i64 addrspace(1)* %o6
  %w7 = sext i32 %p7 to i64
  %o7 = getelementptr i64, i64 addrspace(1)* %out, i32 6
  store i64 %w7, i64 addrspace(1)* %o7
  %o8 = getelementptr i64, i64 addrspace(1)* %out, i32 7
  store i64 %p8, i64 addrspace(1)* %o8
  %w9 = sext i32 %p9 to i64
  %o9 = getelementptr i64, i64 addrspace(1)* %out, i32 8
  store i64 %w9, i64 addrspace(1)* %o9
  %o10 = getelementptr i64, i64 addrspace(1)* %out, i32 9
  store i64 %p10, i64 addrspace(1)* %o10
  %w11 = sext i32 %p11 to i64
  %o11 = getelementptr i64, i64 addrspace(1)* %out, i32 10
  store i64 %w11, i64 addrspace(1)* %o11
  %o12 = getelementptr i64, i64 addrspace(1)* %out, i32 11
  store i64 %p12, i64 addrspace(1)* %o12
  %w13 = sext i32 %p13 to i64
  %o13 = getelementptr i64, i64 addrspace(1)* %out, i32 12
  store i64 %w13, i64 addrspace(1)* %o13
  %o14 = getelementptr i64, i64 addrspace(1)* %out, i32 13
  store i64 %p14, i64 addrspace(1)* %o14
  %w15 = sext i32 %p15 to i64
  %o15 = getelementptr i64, i64 addrspace(1)* %out, i32 14
  store i64 %w15, i64 addrspace(1)* %o15
  %o16 = getelementptr i64, i64 addrspace(1)* %out, i32 15
  store i64 %p16, i64 addrspace(1)* %o16
  %w17 = sext i32 %p17 to i64
  %o17 = getelementptr i64, i64 addrspace(1)* %out, i32 16
  store i64 %w17, i64 addrspace(1)* %o17
  %o18 = getelementptr i64, i64 addrspace(1)* %out, i32 17
  store i64 %p18, i64 addrspace(1)* %o18
  %w19 = sext i32 %p19 to i64
  %o19 = getelementptr i64, i64 addrspace(1)* %out, i32 18
  store i64 %w19, i64 addrspace(1)* %o19
  %o20 = getelementptr i64, i64 addrspace(1)* %out, i32 19
  store i64 %p20, i64 addrspace(1)* %o20
  %w21 = sext i32 %p21 to i64
  %o21 = getelementptr i64, i64 addrspace(1)* %out, i32 20
  store i64 %w21, i64 addrspace(1)* %o21
  %o22 = getelementptr i64, i64 addrspace(1)* %out, i32 21
  store i64 %p22, i64 addrspace(1)* %o22
  %w23 = sext i32 %p23 to i64
  %o23 = getelementptr i64, i64 addrspace(1)* %out, i32 22
  store i64 %w23, i64 addrspace(1)* %o23
  %o24 = getelementptr i64, i64 addrspace(1)* %out, i32 23
  store i64 %p24, i64 addrspace(1)* %o24
  %w25 = sext i32 %p25 to i64
  %o25 = getelementptr i64, i64 addrspace(1)* %out, i32 24
  store i64 %w25, i64 addrspace(1)* %o25
  %o26 = getelementptr i64, i64 addrspace(1)* %out, i32 25
  store i64 %p26, i64 addrspace(1)* %o26
  %w27 = sext i32 %p27 to i64
  %o27 = getelementptr i64, i64 addrspace(1)* %out, i32 26
  store i64 %w27, i64 addrspace(1)* %o27
  %o28 = getelementptr i64, i64 addrspace(1)* %out, i32 27
  store i64 %p28, i64 addrspace(1)* %o28
  %w29 = sext i32 %p29 to i64
  %o29 = getelementptr i64, i64 addrspace(1)* %out, i32 28
  store i64 %w29, i64 addrspace(1)* %o29
  %o30 = getelementptr i64, i64 addrspace(1)* %out, i32 29
  store i64 %p30, i64 addrspace(1)* %o30
  %w31 = sext i32 %p31 to i64
  %o31 = getelementptr i64, i64 addrspace(1)* %out, i32 30
  store i64 %w31, i64 addrspace(1)* %o31
  %o32 = getelementptr i64, i64 addrspace(1)* %out, i32 31
  store i64 %p32, i64 addrspace(1)* %o32
  %w33 = sext i32 %p33 to i64
  %o33 = getelementptr i64, i64 addrspace(1)* %out, i32 32
  store i64 %w33, i64 addrspace(1)* %o33
  %o34 = getelementptr i64, i64 addrspace(1)* %out, i32 33
  store i64 %p34, i64 addrspace(1)* %o34
  %w35 = sext i32 %p35 to i64
  %o35 = getelementptr i64, i64 addrspace(1)* %out, i32 34
  store i64 %w35, i64 addrspace(1)* %o35
  %o36 = getelementptr i64, i64 addrspace(1)* %out, i32 35
  store i64 %p36, i64 addrspace(1)* %o36
  %w37 = sext i32 %p37 to i64
  %o37 = getelementptr i64, i64 addrspace(1)* %out, i32 36
  store i64 %w37, i64 addrspace(1)* %o37
  %o38 = getelementptr i64, i64 addrspace(1)* %out, i32 37
  store i64 %p38, i64 addrspace(1)* %o38
  %w39 = sext i32 %p39 to i64
  %o39 = getelementptr i64, i64 addrspace(1)* %out, i32 38
  store i64 %w39, i64 addrspace(1)* %o39
  %o40 = getelementptr i64, i64 addrspace(1)* %out, i32 39
  store i64 %p40, i64 addrspace(1)* %o40
  %w41 = sext i32 %p41 to i64
  %o41 = getelementptr i64, i64 addrspace(1)* %out, i32 40
  store i64 %w41, i64 addrspace(1)* %o41
  %o42 = getelementptr i64, i64 addrspace(1)* %out, i32 41
  store i64 %p42, i64 addrspace(1)* %o42
  %w43 = sext i32 %p43 to i64
  %o43 = getelementptr i64, i64 addrspace(1)* %out, i32 42
  store i64 %w43, i64 addrspace(1)* %o43
  %o44 = getelementptr i64, i64 addrspace(1)* %out, i32 43
  store i64 %p44, i64 addrspace(1)* %o44
  %w45 = sext i32 %p45 to i64
  %o45 = getelementptr i64, i64 addrspace(1)* %out, i32 44
  store i64 %w45, i64 addrspace(1)* %o45
  %o46 = getelementptr i64, i64 addrspace(1)* %out, i32 45
  store i64 %p46, i64 addrspace(1)* %o46
  %w47 = sext i32 %p47 to i64
  %o47 = getelementptr i64, i64 addrspace(1)* %out, i32 46
  store i64 %w47, i64 addrspace(1)* %o47
  %o48 = getelementptr i64, i64 addrspace(1)* %out, i32 47
  store i64 %p48, i64 addrspace(1)* %o48
  %w49 = sext i32 %p49 to i64
  %o49 = getelementptr i64, i64 addrspace(1)* %out, i32 48
  store i64 %w49, i64 addrspace(1)* %o49
  %o50 = getelementptr i64, i64 addrspace(1)* %out, i32 49
  store i64 %p50, i64 addrspace(1)* %o50
  %w51 = sext i32 %p51 to i64
  %o51 = getelementptr i64, i64 addrspace(1)* %out, i32 50
  store i64 %w51, i64 addrspace(1)* %o51
  %o52 = getelementptr i64, i64 addrspace(1)* %out, i32 51
  store i64 %p52, i64 addrspace(1)* %o52
  %w53 = sext i32 %p53 to i64
  %o53 = getelementptr i64, i64 addrspace(1)* %out, i32 52
  store i64 %w53, i64 addrspace(1)* %o53
  %o54 = getelementptr i64, i64 addrspace(1)* %out, i32 53
  store i64 %p54, i64 addrspace(1)* %o54
  %w55 = sext i32 %p55 to i64
  %o55 = getelementptr i64, i64 addrspace(1)* %out, i32 54
  store i64 %w55, i64 addrspace(1)* %o55
  %o56 = getelementptr i64, i64 addrspace(1)* %out, i32 55
  store i64 %p56, i64 addrspace(1)* %o56
  %w57 = sext i32 %p57 to i64
  %o57 = getelementptr i64, i64 addrspace(1)* %out, i32 56
  store i64 %w57, i64 addrspace(1)* %o57
  %o58 = getelementptr i64, i64 addrspace(1)* %out, i32 57
  store i64 %p58, i64 addrspace(1)* %o58
  %w59 = sext i32 %p59 to i64
  %o59 = getelementptr i64, i64 addrspace(1)* %out, i32 58
  store i64 %w59, i64 addrspace(1)* %o59
  ret void
}

; Module globals: out[0..3] = table (initialised .global), out[4] = scale (.global),
; out[5] = the bits of coef[1] (.const, 2.5f).
define void @llvm_globals(i32 addrspace(1)* %out) {
  %t0p = getelementptr [4 x i32], [4 x i32] addrspace(1)* @table, i32 0, i32 0
  %t1p = getelementptr [4 x i32], [4 x i32] addrspace(1)* @table, i32 0, i32 1
  %t2p = getelementptr [4 x i32], [4 x i32] addrspace(1)* @table, i32 0, i32 2
  %t3p = getelementptr [4 x i32], [4 x i32] addrspace(1)* @table, i32 0, i32 3
  %t0 = load volatile i32, i32 addrspace(1)* %t0p
  %t1 = load volatile i32, i32 addrspace(1)* %t1p
  %t2 = load volatile i32, i32 addrspace(1)* %t2p
  %t3 = load volatile i32, i32 addrspace(1)* %t3p
  %sc = load volatile i32, i32 addrspace(1)* @scale
  %cp = getelementptr [2 x float], [2 x float] addrspace(4)* @coef, i32 0, i32 1
  %cv = load volatile float, float addrspace(4)* %cp
  %cb = bitcast float %cv to i32
  %o1 = getelementptr i32, i32 addrspace(1)* %out, i32 1
  %o2 = getelementptr i32, i32 addrspace(1)* %out, i32 2
  %o3 = getelementptr i32, i32 addrspace(1)* %out, i32 3
  %o4 = getelementptr i32, i32 addrspace(1)* %out, i32 4
  %o5 = getelementptr i32, i32 addrspace(1)* %out, i32 5
  store i32 %t0, i32 addrspace(1)* %out
  store i32 %t1, i32 addrspace(1)* %o1
  store i32 %t2, i32 addrspace(1)* %o2
  store i32 %t3, i32 addrspace(1)* %o3
  store i32 %sc, i32 addrspace(1)* %o4
  store i32 %cb, i32 addrspace(1)* %o5
  ret void
}

; Dynamic shared memory (.extern .shared): the block's threads write dsmem[i] = 3 * i for
; i < nwords, then thread 0 writes their sum to out[block].
define void @llvm_dyn_shared(i32 addrspace(1)* %out, i32 %nwords) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  br label %fill
fill:
  %i = phi i32 [ %tid, %entry ], [ %inext, %fillbody ]
  %more = icmp ult i32 %i, %nwords
  br i1 %more, label %fillbody, label %filled
fillbody:
  %v = mul i32 %i, 3
  %p = getelementptr [0 x i32], [0 x i32] addrspace(3)* @dsmem, i32 0, i32 %i
  store volatile i32 %v, i32 addrspace(3)* %p
  %inext = add i32 %i, %ntid
  br label %fill
filled:
  call void @llvm.nvvm.barrier0()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %sum, label %done
sum:
  %j = phi i32 [ 0, %filled ], [ %jnext, %sumbody ]
  %acc = phi i32 [ 0, %filled ], [ %acc2, %sumbody ]
  %jmore = icmp ult i32 %j, %nwords
  br i1 %jmore, label %sumbody, label %write
sumbody:
  %q = getelementptr [0 x i32], [0 x i32] addrspace(3)* @dsmem, i32 0, i32 %j
  %w = load volatile i32, i32 addrspace(3)* %q
  %acc2 = add i32 %acc, %w
  %jnext = add i32 %j, 1
  br label %sum
write:
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %o = getelementptr i32, i32 addrspace(1)* %out, i32 %b
  store i32 %acc, i32 addrspace(1)* %o
  br label %done
done:
  ret void
}

; 16 KiB of static shared memory (a module-scope .shared array) beside the dynamic one:
; tile[t] = t + 1; dsmem[t] = tile[ntid - 1 - t]; out[t] = dsmem[t] (one block).
define void @llvm_static_shared(i32 addrspace(1)* %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %v = add i32 %t, 1
  %tp = getelementptr [4096 x i32], [4096 x i32] addrspace(3)* @tile, i32 0, i32 %t
  store volatile i32 %v, i32 addrspace(3)* %tp
  call void @llvm.nvvm.barrier0()
  %n1 = sub i32 %n, 1
  %r = sub i32 %n1, %t
  %rp = getelementptr [4096 x i32], [4096 x i32] addrspace(3)* @tile, i32 0, i32 %r
  %rv = load volatile i32, i32 addrspace(3)* %rp
  %dp = getelementptr [0 x i32], [0 x i32] addrspace(3)* @dsmem, i32 0, i32 %t
  store volatile i32 %rv, i32 addrspace(3)* %dp
  %dv = load volatile i32, i32 addrspace(3)* %dp
  %op = getelementptr i32, i32 addrspace(1)* %out, i32 %t
  store i32 %dv, i32 addrspace(1)* %op
  ret void
}

; A C++-mangled name (llvm_scale(float*, unsigned int, float)) calling the .func:
; x[i] = scale.helper(x[i], s) for i < n.
define void @_Z10llvm_scalePfjf(float addrspace(1)* %x, i32 %n, float %s) {
  %i = call i32 @global_id()
  %in = icmp ult i32 %i, %n
  br i1 %in, label %work, label %done
work:
  %p = getelementptr float, float addrspace(1)* %x, i32 %i
  %v = load float, float addrspace(1)* %p
  %r = call float @"scale.helper"(float %v, float %s)
  store float %r, float addrspace(1)* %p
  br label %done
done:
  ret void
}

; Names of other front ends: '$' (valid in PTX), Julia's numbered names, and a Numba
; mangled name longer than 128 characters. Each writes its tag to out[0].
define void @"llvm$dollar"(i32 addrspace(1)* %out) {
  store i32 36, i32 addrspace(1)* %out
  ret void
}
define void @julia_vadd_1234(i32 addrspace(1)* %out) {
  store i32 1234, i32 addrspace(1)* %out
  ret void
}
define void @_ZN6cudapy8__main__9axpy_2412B96cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8oxrNQE_3dE5ArrayIfLi1E1C7mutable7alignedE(i32 addrspace(1)* %out) {
  store i32 2412, i32 addrspace(1)* %out
  ret void
}

!nvvm.annotations = !{!0, !1, !2, !3, !4, !5, !6, !7, !8, !9, !10, !11, !12, !13, !14, !15, !16, !17, !18, !19, !20, !21}
!0 = !{void (i32 addrspace(1)*, i32)* @llvm_maxntid, !"kernel", i32 1}
!1 = !{void (i32 addrspace(1)*, i32)* @llvm_maxntid, !"maxntidx", i32 128}
!2 = !{void (i32 addrspace(1)*, i32)* @llvm_maxntid, !"minctasm", i32 2}
!3 = !{void (i32 addrspace(1)*, i32)* @llvm_reqntid, !"kernel", i32 1}
!4 = !{void (i32 addrspace(1)*, i32)* @llvm_reqntid, !"reqntidx", i32 64}
!5 = !{void (i32 addrspace(1)*)* @llvm_reqntid_2d, !"kernel", i32 1}
!6 = !{void (i32 addrspace(1)*)* @llvm_reqntid_2d, !"reqntidx", i32 16}
!7 = !{void (i32 addrspace(1)*)* @llvm_reqntid_2d, !"reqntidy", i32 4}
!8 = !{void (i64 addrspace(1)*, %struct.S*, i32, i64, i16, i8, double, float)* @llvm_byval, !"kernel", i32 1}
!9 = !{void (i32 addrspace(1)*)* @llvm_globals, !"kernel", i32 1}
!10 = !{void (i32 addrspace(1)*, i32)* @llvm_dyn_shared, !"kernel", i32 1}
!11 = !{void (i32 addrspace(1)*)* @llvm_static_shared, !"kernel", i32 1}
!12 = !{void (float addrspace(1)*, i32, float)* @_Z10llvm_scalePfjf, !"kernel", i32 1}
!13 = !{void (i32 addrspace(1)*)* @"llvm$dollar", !"kernel", i32 1}
!14 = !{void (i32 addrspace(1)*)* @julia_vadd_1234, !"kernel", i32 1}
!15 = !{void (i32 addrspace(1)*)* @_ZN6cudapy8__main__9axpy_2412B96cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8oxrNQE_3dE5ArrayIfLi1E1C7mutable7alignedE, !"kernel", i32 1}
!16 = !{void (i32 addrspace(1)*)* @llvm_globals, !"maxntidx", i32 32}
!17 = !{void (i32 addrspace(1)*, i32)* @llvm_dyn_shared, !"maxntidx", i32 256}
!18 = !{void (i32 addrspace(1)*)* @llvm_static_shared, !"maxntidx", i32 1024}
!19 = !{void (float addrspace(1)*, i32, float)* @_Z10llvm_scalePfjf, !"maxntidx", i32 256}
!20 = !{void (i32 addrspace(1)*)* @"llvm$dollar", !"maxntidx", i32 32}
!21 = !{void (i64 addrspace(1)*, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32, i64, i32)* @llvm_many, !"kernel", i32 1}
