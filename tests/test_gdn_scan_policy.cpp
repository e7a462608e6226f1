// Host-side choice of the GDN state-scan kernel shape (src/ops/cuda/gdn_scan_policy.h): every variant
// tiles the state and its warps the way gdn_chunk.cu's scans require, and the automatic rule keeps the
// scans in one wave while widening slices as pairs grow. No GPU needed.
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
    EXPECT_EQ(gdn_scan_variant_for(128, 8 * 16, sms), 7);
    EXPECT_EQ(gdn_scan_variant_for(128, 2 * 16, sms), 5);
    EXPECT_EQ(gdn_scan_variant_for(128, 1 * 16, sms), 4);
    EXPECT_EQ(gdn_scan_variant_for(64, 8 * 9, sms), 5);
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
                if (sh.stages == 2 && sh.rows < 64)
                    EXPECT_LE(gdn_scan_blocks(v, D, pairs), size_t(sms) * (D == 64 ? 2 : 1))
                        << "D " << D << " pairs " << pairs << " sms " << sms;
                // never a narrower slice for more pairs (fewer blocks per pair as the GPU fills)
                EXPECT_GE(sh.rows, prev_rows) << "D " << D << " pairs " << pairs << " sms " << sms;
                prev_rows = sh.rows;
                // a pair that alone fills the GPU gets the widest slice at d 128
                if (D == 128 && 2 * pairs > size_t(sms)) EXPECT_EQ(sh.rows, 64);
            }
        }
    }
}
