// Host-side choice of the GDN state-scan kernel shape (src/ops/cuda/gdn_scan_policy.h): every variant
// tiles the state and its warps the way gdn_fwd_scan.cu's and gdn_bwd_scan.cu's kernels require, the
// automatic rule keeps the scans in one wave while widening slices as pairs grow, and it chooses only
// variants that have kernels. No GPU needed.
#include <gtest/gtest.h>

#include "ops/cuda/gdn_scan_policy.h"

using namespace hydra::cuda;

// The tilings gdn_fwd_scan_kernel / gdn_bwd_scan_kernel derive from (D, rows, warps) must be whole:
// column groups NW / 4, n-tiles of 8 columns per warp, state-owning warps NW / 2 covering the slice's
// 16-row groups, and the reverse scan's dM tiling over all warps.
TEST(GdnScanPolicy, EveryVariantTilesBothHeadDims) {
    for (int v = 0; v < kGdnScanVariants; ++v) {
        const GdnScanShape sh = kGdnScanShapes[v];
        SCOPED_TRACE("variant " + std::to_string(v));
        EXPECT_TRUE(sh.stages == 1 || sh.stages == 2);
        EXPECT_EQ(sh.warps % 4, 0);
        EXPECT_LE(sh.warps * 32, 1024);
        for (int D : {64, 128}) {
            if (!gdn_scan_fits(v, D)) continue;
            EXPECT_EQ(D % sh.rows, 0);
            const int ncg = sh.warps / 4;  // column groups of the forward's [W; Q] M0^T
            EXPECT_EQ(sh.rows % (ncg * 8), 0) << "n-tiles per warp";
            const int nww = sh.warps / 2, rg = sh.rows / 16;  // state-owning warps, 16-row groups
            EXPECT_LE(rg, nww);
            EXPECT_EQ(nww % rg, 0);
            EXPECT_EQ((D * rg) % (nww * 8), 0) << "state columns per owning warp";
            const int wr = rg < sh.warps ? rg : sh.warps, wc = sh.warps / wr;  // reverse scan's dM tiling
            EXPECT_EQ(D % (wc * 8), 0);
        }
    }
}

TEST(GdnScanPolicy, ChoicesOnAnH200) {
    const int sms = 132;
    // the shapes the choice was measured on (gdn_scan_policy.h)
    EXPECT_EQ(gdn_scan_variant_for(128, 8 * 16, sms), kGdnScanHead128);
    EXPECT_EQ(gdn_scan_variant_for(128, 2 * 16, sms), kGdnScan32);
    EXPECT_EQ(gdn_scan_variant_for(128, 1 * 16, sms), kGdnScan16);
    EXPECT_EQ(gdn_scan_variant_for(128, 4 * 16, sms), kGdnScan64);  // 64 rows x 8 warps beat x 16
    EXPECT_EQ(gdn_scan_variant_for(64, 8 * 9, sms), kGdnScan64);
    EXPECT_EQ(gdn_scan_variant_for(64, 4 * 9, sms), kGdnScan32);
    EXPECT_NE(gdn_scan_variant_for(64, 16 * 9, sms), kGdnScan64);  // whole d 64 heads lost there
}

TEST(GdnScanPolicy, OneWaveAndWiderSlicesAsPairsGrow) {
    for (int sms : {16, 78, 114, 132}) {
        for (int D : {64, 128}) {
            int prev_rows = 0;
            for (size_t pairs = 1; pairs <= 4096; ++pairs) {
                const int v = gdn_scan_variant_for(D, pairs, sms);
                ASSERT_GE(v, 0);
                ASSERT_LT(v, kGdnScanVariants);
                EXPECT_TRUE(gdn_scan_fits(v, D));
                const GdnScanShape sh = kGdnScanShapes[v];
                // the double-buffered narrow slices only where their blocks fit one wave
                if (sh.stages == 2 && sh.rows < 64) {
                    EXPECT_LE(gdn_scan_blocks(v, D, pairs), size_t(sms) * (D == 64 ? 2 : 1))
                        << "D " << D << " pairs " << pairs << " sms " << sms;
                }
                // at d 128 never a narrower slice for more pairs (fewer blocks per pair as the GPU fills);
                // at d 64 whole heads only in one wave, where they leave no SM without a block
                if (D == 128) {
                    EXPECT_GE(sh.rows, prev_rows) << "pairs " << pairs << " sms " << sms;
                } else if (sh.rows == 64) {
                    EXPECT_LE(pairs, size_t(sms)) << "pairs " << pairs << " sms " << sms;
                }
                prev_rows = sh.rows;
                // pairs that fill half the GPU or more get whole heads at d 128
                if (D == 128 && 2 * pairs > size_t(sms)) {
                    EXPECT_EQ(sh.rows, 128);
                }
            }
        }
    }
}

// Only the variants the rule can choose have kernels (gdn_kernels.h's with_scan_shape instantiates those):
// the rule never leaves them, at any SM count, and on an H200 each of them is chosen for some pair count.
TEST(GdnScanPolicy, ChoosesOnlyVariantsWithKernels) {
    for (int D : {64, 128}) {
        for (int sms : {1, 16, 78, 114, 132, 144}) {
            for (size_t pairs = 1; pairs <= 4096; ++pairs) {
                const int v = gdn_scan_variant_for(D, pairs, sms);
                EXPECT_TRUE(gdn_scan_used(v, D)) << "D " << D << " pairs " << pairs << " sms " << sms;
            }
        }
        for (int v = 0; v < kGdnScanVariants; ++v) {
            if (!gdn_scan_used(v, D)) continue;
            EXPECT_TRUE(gdn_scan_fits(v, D)) << "variant " << v << " D " << D;
            bool chosen = false;
            for (size_t pairs = 1; pairs <= 4096 && !chosen; ++pairs)
                chosen = gdn_scan_variant_for(D, pairs, 132) == v;
            EXPECT_TRUE(chosen) << "variant " << v << " D " << D << " is never chosen on 132 SMs";
        }
    }
}

// The streamed forward: a prep block beside every block of a one-wave scan, in shared memory and registers.
TEST(GdnScanPolicy, PrepBesideScanNeedsSharedMemoryAndRegisters) {
    const size_t sm = 228 * 1024, rsv = 1024, regs = 65536, prep = 75008, prep_w = 8, prep_wr = 32 * 80;
    const size_t scan32 = 153600, scan128 = 228864;  // ScanSmem<128, 32 / 128, 2>
    const size_t wr128 = 32 * 128;                   // a warp of 128 registers
    EXPECT_TRUE(gdn_prep_fits_beside_scan(128, 132, scan32, prep, sm, rsv, 8, wr128, prep_w, prep_wr,
                                          regs));  // B2 d 128
    EXPECT_TRUE(gdn_prep_fits_beside_scan(72, 132, 121344, 58624, sm, rsv, 8, wr128, prep_w, prep_wr,
                                          regs));  // B8 d 64
    // whole d 128 heads: neither shared memory nor registers leave room; more blocks than SMs never
    EXPECT_FALSE(
        gdn_prep_fits_beside_scan(128, 132, scan128, prep, sm, rsv, 16, wr128, prep_w, prep_wr, regs));
    EXPECT_FALSE(
        gdn_prep_fits_beside_scan(128, 132, scan32, prep, sm, rsv, 16, wr128, prep_w, prep_wr, regs));
    EXPECT_FALSE(gdn_prep_fits_beside_scan(133, 132, scan32, prep, sm, rsv, 8, wr128, prep_w, prep_wr, regs));
    EXPECT_FALSE(
        gdn_prep_fits_beside_scan(128, 132, scan32, prep, sm, 3 * 1024, 8, wr128, prep_w, prep_wr, regs));
}

// The registers of one sub-partition (a quarter of the SM's) hold a quarter of each block's warps, rounded
// up: a 9-warp block of 128 registers leaves no room there for two prep warps of 88, though the
// SM's 64K have room for both blocks; at 112 registers (3.5K a warp) it does.
TEST(GdnScanPolicy, PrepBesideScanCountsSubPartitionRegisters) {
    const size_t sm = 228 * 1024, rsv = 1024, regs = 65536, prep = 75008, scan = 131072;
    const size_t prep_wr = 32 * 88;
    EXPECT_LE(9 * 32 * 128 + 8 * prep_wr, regs);  // the whole SM's registers would hold both
    EXPECT_FALSE(gdn_prep_fits_beside_scan(128, 132, scan, prep, sm, rsv, 9, 32 * 128, 8, prep_wr, regs));
    EXPECT_TRUE(gdn_prep_fits_beside_scan(128, 132, scan, prep, sm, rsv, 9, 32 * 112, 8, prep_wr, regs));
    EXPECT_TRUE(gdn_prep_fits_beside_scan(128, 132, scan, prep, sm, rsv, 8, 32 * 128, 8, prep_wr, regs));
}
